// CudaSampler: rank 0's sampler when the logits are on its GPU. Same contract as
// SampleBatch and PromptLogprobs of worker/sampling/sampler.h — the same validation and error
// messages, the same steps and the same seeded draw — but the logits stay on the device
// and only each request's result (token, its logprob, the top-n) is copied back.
//
// Results match the CPU sampler's exactly for greedy (penalties included) and for the
// top-n ids; logprobs agree to ~1e-6 (exp and summation order differ); a seeded draw
// picks the CPU's token unless u falls within float rounding of a boundary between two
// tokens' cumulative masses, and never a token that the CPU's truncation drops by more
// than rounding. The draw itself is deterministic: the same inputs give the same tokens.
//
// Owned by the thread that runs rank 0's step loop; not thread-safe. Every call enqueues
// its work on `stream` after whatever produced the logits there, and synchronises the
// stream before returning.
#ifndef TPSERVE_WORKER_SAMPLING_CUDA_SAMPLER_H_
#define TPSERVE_WORKER_SAMPLING_CUDA_SAMPLER_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/cuda/device_buffer.h"
#include "worker/kernels/cuda/sampling.h"
#include "worker/sampling/sampler.h"

namespace tpserve {

class CudaSampler {
 public:
  // Preallocates the device scratch for batches of up to max_rows requests (larger ones
  // run in pieces): 2 · max_rows · vocab_size · 4 bytes for penalised rows and token
  // counts, plus a few KB per row. vocab_size in [1, kSamplingMaxVocab].
  static absl::StatusOr<std::unique_ptr<CudaSampler>> Create(int64_t vocab_size,
                                                             int max_rows,
                                                             cudaStream_t stream);

  // d_logits: device [rows, vocab_size] fp32. As tpserve::SampleBatch: one result per
  // request in request order, or the first malformed request's error, or the first
  // request (in order) whose row is not finite or whose penalised row overflows.
  absl::StatusOr<std::vector<SampleResult>> SampleBatch(
      const float* d_logits, int64_t rows, absl::Span<const SampleRequest> requests);

  // As tpserve::PromptLogprobs: row first_row + i of d_logits [rows, vocab_size] scores
  // next_tokens[i], with its top_n alternatives.
  absl::StatusOr<std::vector<SampleResult>> PromptLogprobs(
      const float* d_logits, int64_t rows, int64_t first_row,
      absl::Span<const int32_t> next_tokens, int top_n);

  int64_t vocab_size() const { return vocab_; }
  int max_rows() const { return max_rows_; }

 private:
  CudaSampler(int64_t vocab, int max_rows, cudaStream_t stream)
      : vocab_(vocab), max_rows_(max_rows), stream_(stream) {}

  // One piece of at most max_rows_ requests; request j is request first + j of the call.
  absl::Status SampleChunk(const float* d_logits, absl::Span<const SampleRequest> requests,
                           size_t first, std::vector<SampleResult>& results);
  // Copies host_history_ to the device, growing history_ when it is too small.
  absl::Status UploadHistory();
  // Copies the first n results back and waits for the stream.
  absl::Status DownloadResults(int n);

  const int64_t vocab_;
  const int max_rows_;
  const cudaStream_t stream_;

  // Device buffers, [max_rows_] of each struct unless noted.
  DeviceBuffer logprob_rows_;  // SamplingLogprobRow
  DeviceBuffer draw_params_;   // SamplingDrawParams
  DeviceBuffer stats_;         // SamplingRowStats
  DeviceBuffer results_;       // SamplingResult
  DeviceBuffer penalised_;     // float [max_rows_, vocab_]
  DeviceBuffer counts_;        // int32 [max_rows_, vocab_], zero between calls
  DeviceBuffer history_;       // int32 token ids, grown on demand

  // Host staging, reused across calls.
  std::vector<SamplingLogprobRow> host_rows_;
  std::vector<SamplingDrawParams> host_params_;
  std::vector<int32_t> host_history_;
  std::vector<SamplingResult> host_results_;
};

}  // namespace tpserve

#endif  // TPSERVE_WORKER_SAMPLING_CUDA_SAMPLER_H_
