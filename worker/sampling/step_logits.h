// StepLogits: one step's logits wherever the backend left them, and the two ways rank 0
// scores them, with the contract of worker/sampling/sampler.h (SampleBatch, PromptLogprobs).
// HostStepLogits holds a host Tensor and runs the CPU sampler; the CUDA backend's keeps
// them on the GPU and runs CudaSampler, copying back only the results.
//
// Valid until the model's next step. One thread (the rank's).
#ifndef TPSERVE_WORKER_SAMPLING_STEP_LOGITS_H_
#define TPSERVE_WORKER_SAMPLING_STEP_LOGITS_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/sampling/sampler.h"
#include "worker/tensor.h"

namespace tpserve {

class StepLogits {
 public:
  virtual ~StepLogits() = default;
  // As SampleBatch on these logits.
  virtual absl::StatusOr<std::vector<SampleResult>> Sample(
      absl::Span<const SampleRequest> requests) = 0;
  // As PromptLogprobs on these logits.
  virtual absl::StatusOr<std::vector<SampleResult>> PromptLogprobs(
      int64_t first_row, absl::Span<const int32_t> next_tokens, int top_n) = 0;
};

class HostStepLogits : public StepLogits {
 public:
  explicit HostStepLogits(Tensor logits) : logits_(std::move(logits)) {}  // [rows, V]
  absl::StatusOr<std::vector<SampleResult>> Sample(
      absl::Span<const SampleRequest> requests) override {
    return SampleBatch(logits_, requests);
  }
  absl::StatusOr<std::vector<SampleResult>> PromptLogprobs(
      int64_t first_row, absl::Span<const int32_t> next_tokens, int top_n) override {
    return tpserve::PromptLogprobs(logits_, first_row, next_tokens, top_n);
  }

 private:
  Tensor logits_;
};

}  // namespace tpserve

#endif  // TPSERVE_WORKER_SAMPLING_STEP_LOGITS_H_
