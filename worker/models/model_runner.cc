#include "worker/models/model_runner.h"

#include <utility>

#include "absl/strings/str_cat.h"

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
  // More than the host has free would end in the OOM killer, not an error.
  const KvCacheShape shape = model_->CacheShape(num_blocks, block_size);
  const int64_t available = AvailableHostBytes();
  if (shape.bytes() > available) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "kv cache: ", num_blocks, " blocks of ", block_size, " tokens need ", shape.bytes(),
        " bytes, more than the host's available memory (", available, " bytes)"));
  }
  absl::StatusOr<KvCache> cache = KvCache::Create(shape, available);
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
