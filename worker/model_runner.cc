#include "worker/model_runner.h"

#include <limits>
#include <utility>

namespace tpserve {

absl::StatusOr<std::unique_ptr<StepLogits>> ModelRunner::ForwardForSampling(
    const StepBatch& batch, bool /*sampling*/) {
  absl::StatusOr<Tensor> logits = Forward(batch);
  if (!logits.ok()) return logits.status();
  return std::make_unique<HostStepLogits>(*std::move(logits));
}

absl::Status CpuModelRunner::AllocateCache(int num_blocks, int block_size) {
  cache_.reset();
  shape_ = KvCacheShape();
  absl::StatusOr<KvCache> cache = KvCache::Create(model_->CacheShape(num_blocks, block_size),
                                                  std::numeric_limits<int64_t>::max());
  if (!cache.ok()) return cache.status();
  cache_ = *std::move(cache);
  shape_ = cache_->shape();
  return absl::OkStatus();
}

absl::StatusOr<Tensor> CpuModelRunner::Forward(const StepBatch& batch) {
  if (!cache_.has_value()) return absl::FailedPreconditionError("no KV cache allocated");
  return model_->Forward(batch, *cache_);
}

}  // namespace tpserve
