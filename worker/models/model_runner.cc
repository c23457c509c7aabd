#include "worker/models/model_runner.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace tpserve {

absl::StatusOr<std::unique_ptr<StepLogits>> ModelRunner::ForwardForSampling(
    const StepBatch& batch, bool /*sampling*/) {
  TPSERVE_ASSIGN_OR_RETURN(Tensor logits, Forward(batch));
  return std::make_unique<HostStepLogits>(std::move(logits));
}

absl::Status CpuModelRunner::AllocateCache(int num_blocks, int block_size) {
  cache_.reset();
  shape_ = KvCacheShape();
  // More than the host has free would end in the OOM killer, not an error.
  const KvCacheShape shape = CacheShape(num_blocks, block_size);
  const int64_t available = AvailableHostBytes();
  if (shape.bytes() > available) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "kv cache: ", num_blocks, " blocks of ", block_size, " tokens need ", shape.bytes(),
        " bytes, more than the host's available memory (", available, " bytes)"));
  }
  TPSERVE_ASSIGN_OR_RETURN(cache_, KvCache::Create(shape, available));
  shape_ = cache_->shape();
  return absl::OkStatus();
}

absl::StatusOr<Tensor> CpuModelRunner::Forward(const StepBatch& batch) {
  if (!cache_.has_value()) return absl::FailedPreconditionError("no KV cache allocated");
  return model_->Forward(batch, *cache_);
}

}  // namespace tpserve
