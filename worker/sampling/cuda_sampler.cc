#include "worker/sampling/cuda_sampler.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "worker/cuda/cuda_status.h"
#include "worker/sampling/sampling_rules.h"

namespace tpserve {
namespace {

// The kernels' view of one request; appends its history to `history` when penalised.
SamplingDrawParams DrawParams(const SampleRequest& r, int64_t vocab,
                              std::vector<int32_t>& history) {
  const SamplingParams& p = r.params;
  SamplingDrawParams d;
  d.row = r.row;
  d.greedy = IsGreedy(p);
  if (!d.greedy) {
    d.scale = 1.0f / p.temperature;
    d.u = StepUniform(*p.seed, r.output_tokens.size());
    d.top_k = p.top_k > 0 && p.top_k < vocab ? p.top_k : 0;
    d.top_p = p.top_p;
    d.min_p = p.min_p;
  }
  d.penalised = HasPenalties(p);
  if (d.penalised) {
    d.repetition_penalty = p.repetition_penalty;
    d.presence_penalty = p.presence_penalty;
    d.frequency_penalty = p.frequency_penalty;
    d.history_begin = history.size();
    if (p.repetition_penalty != 1.0f) {
      history.insert(history.end(), r.prompt_tokens.begin(), r.prompt_tokens.end());
    }
    d.output_begin = history.size();
    history.insert(history.end(), r.output_tokens.begin(), r.output_tokens.end());
    d.history_end = history.size();
  }
  return d;
}

SampleResult ToSampleResult(const SamplingResult& r) {
  SampleResult out{r.token, r.logprob, {}};
  const int n = std::clamp(r.top_count, 0, kSamplingMaxTopN);
  out.top.reserve(n);
  for (int i = 0; i < n; ++i) out.top.push_back({r.top[i].token, r.top[i].logprob});
  return out;
}

absl::Status CheckLogits(const float* d_logits, int64_t rows) {
  if (rows < 0 || (rows > 0 && d_logits == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrCat("logits must be a device [rows, vocab_size] array, got ", rows,
                     " rows at ", d_logits == nullptr ? "null" : "a pointer"));
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status CopyToDevice(const std::vector<T>& host, const DeviceBuffer& device,
                          cudaStream_t stream) {
  if (host.empty()) return absl::OkStatus();
  TPSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(device.data(), host.data(),
                                               host.size() * sizeof(T),
                                               cudaMemcpyHostToDevice, stream));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaSampler>> CudaSampler::Create(int64_t vocab_size,
                                                                 int max_rows,
                                                                 cudaStream_t stream) {
  if (vocab_size < 1 || vocab_size > kSamplingMaxVocab) {
    return absl::InvalidArgumentError(absl::StrCat(
        "vocab_size must be in [1, ", kSamplingMaxVocab, "], got ", vocab_size));
  }
  if (max_rows < 1) {
    return absl::InvalidArgumentError(absl::StrCat("max_rows must be >= 1, got ", max_rows));
  }
  std::unique_ptr<CudaSampler> s(new CudaSampler(vocab_size, max_rows, stream));
  const size_t rows = max_rows;
  const size_t row_bytes = rows * vocab_size * sizeof(float);
  std::pair<DeviceBuffer*, size_t> buffers[] = {
      {&s->logprob_rows_, rows * sizeof(SamplingLogprobRow)},
      {&s->draw_params_, rows * sizeof(SamplingDrawParams)},
      {&s->stats_, rows * sizeof(SamplingRowStats)},
      {&s->results_, rows * sizeof(SamplingResult)},
      {&s->penalised_, row_bytes},
      {&s->counts_, row_bytes},
  };
  for (auto& [buffer, bytes] : buffers) {
    TPSERVE_ASSIGN_OR_RETURN(*buffer, DeviceBuffer::Create(bytes));
  }
  TPSERVE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(s->counts_.data(), 0, row_bytes, stream));
  TPSERVE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  return s;
}

absl::StatusOr<std::vector<SampleResult>> CudaSampler::SampleBatch(
    const float* d_logits, int64_t rows, absl::Span<const SampleRequest> requests) {
  TPSERVE_RETURN_IF_ERROR(CheckLogits(d_logits, rows));
  for (size_t i = 0; i < requests.size(); ++i) {
    if (absl::Status s = CheckSampleRequest(requests[i], rows, vocab_); !s.ok()) {
      return ForRequest(i, s);
    }
  }
  std::vector<SampleResult> results;
  results.reserve(requests.size());
  for (size_t first = 0; first < requests.size(); first += max_rows_) {
    const size_t n = std::min<size_t>(max_rows_, requests.size() - first);
    if (absl::Status s = SampleChunk(d_logits, requests.subspan(first, n), first, results);
        !s.ok()) {
      return s;
    }
  }
  return results;
}

absl::Status CudaSampler::SampleChunk(const float* d_logits,
                                      absl::Span<const SampleRequest> requests, size_t first,
                                      std::vector<SampleResult>& results) {
  const int n = requests.size();
  host_rows_.clear();
  host_params_.clear();
  host_history_.clear();
  bool any_penalised = false;
  for (const SampleRequest& r : requests) {
    host_rows_.push_back({r.row, -1, r.params.logprobs});
    host_params_.push_back(DrawParams(r, vocab_, host_history_));
    any_penalised |= host_params_.back().penalised != 0;
  }
  TPSERVE_RETURN_IF_ERROR(CopyToDevice(host_rows_, logprob_rows_, stream_));
  TPSERVE_RETURN_IF_ERROR(CopyToDevice(host_params_, draw_params_, stream_));
  TPSERVE_RETURN_IF_ERROR(UploadHistory());
  auto* stats = stats_.as<SamplingRowStats>();
  auto* out = results_.as<SamplingResult>();
  const auto* params = draw_params_.as<const SamplingDrawParams>();
  TPSERVE_CUDA_RETURN_IF_ERROR(LaunchSamplingLogprobs(
      d_logits, vocab_, logprob_rows_.as<const SamplingLogprobRow>(), n, stats, out, stream_));
  if (any_penalised) {
    TPSERVE_CUDA_RETURN_IF_ERROR(LaunchSamplingPenalties(
        d_logits, vocab_, params, n, history_.as<const int32_t>(), penalised_.as<float>(),
        counts_.as<int32_t>(), stats, out, stream_));
  }
  TPSERVE_CUDA_RETURN_IF_ERROR(LaunchSamplingDraw(
      d_logits, vocab_, params, n, penalised_.as<const float>(), stats, out, stream_));
  TPSERVE_RETURN_IF_ERROR(DownloadResults(n));
  for (int j = 0; j < n; ++j) {
    const SamplingResult& r = host_results_[j];
    if (r.not_finite || r.penalised_overflow) {  // this request's own failure, as on the CPU
      results.push_back(
          SampleResult::Failed(r.not_finite ? RowNotFiniteError() : PenalisedOverflowError()));
      continue;
    }
    if (r.lost_selection) {  // the kernel's, not the request's: the rank fails
      return ForRequest(first + j,
                        absl::InternalError("the sampling kernel lost its selection"));
    }
    results.push_back(ToSampleResult(r));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<SampleResult>> CudaSampler::PromptLogprobs(
    const float* d_logits, int64_t rows, int64_t first_row,
    absl::Span<const int32_t> next_tokens, int top_n) {
  TPSERVE_RETURN_IF_ERROR(CheckLogits(d_logits, rows));
  if (absl::Status s = CheckPromptLogprobs(rows, first_row, next_tokens, top_n, vocab_);
      !s.ok()) {
    return s;
  }
  std::vector<SampleResult> results;
  results.reserve(next_tokens.size());
  for (size_t first = 0; first < next_tokens.size(); first += max_rows_) {
    const int n = std::min<size_t>(max_rows_, next_tokens.size() - first);
    host_rows_.clear();
    for (int j = 0; j < n; ++j) {
      host_rows_.push_back({first_row + static_cast<int64_t>(first) + j,
                            next_tokens[first + j], top_n});
    }
    TPSERVE_RETURN_IF_ERROR(CopyToDevice(host_rows_, logprob_rows_, stream_));
    TPSERVE_CUDA_RETURN_IF_ERROR(LaunchSamplingLogprobs(
        d_logits, vocab_, logprob_rows_.as<const SamplingLogprobRow>(), n,
        stats_.as<SamplingRowStats>(), results_.as<SamplingResult>(), stream_));
    TPSERVE_RETURN_IF_ERROR(DownloadResults(n));
    for (int j = 0; j < n; ++j) {
      if (host_results_[j].not_finite) {
        return ForRow(host_rows_[j].row, RowNotFiniteError());
      }
      results.push_back(ToSampleResult(host_results_[j]));
    }
  }
  return results;
}

absl::Status CudaSampler::UploadHistory() {
  const size_t bytes = host_history_.size() * sizeof(int32_t);
  if (bytes > history_.bytes()) {
    // The previous call synchronised the stream, so nothing still reads the old buffer.
    TPSERVE_ASSIGN_OR_RETURN(history_, DeviceBuffer::Create(std::max(bytes, 2 * history_.bytes())));
  }
  return CopyToDevice(host_history_, history_, stream_);
}

absl::Status CudaSampler::DownloadResults(int n) {
  host_results_.resize(n);
  TPSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_results_.data(), results_.data(),
                                               n * sizeof(SamplingResult),
                                               cudaMemcpyDeviceToHost, stream_));
  TPSERVE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

}  // namespace tpserve
