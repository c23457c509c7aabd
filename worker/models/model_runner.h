// ModelRunner: one rank's model shards and KV cache behind one interface, so the rank
// executor, the forward tool and the benchmarks drive the CPU and the CUDA backends
// alike. CpuModelRunner wraps LlamaModel with a host KvCache; CudaLlamaModel
// (worker/models/cuda/llama_cuda.h) keeps weights and cache on the GPU.
//
// Every rank of a group must call Forward with identical batches. One thread at a time.
#ifndef TPSERVE_WORKER_MODELS_MODEL_RUNNER_H_
#define TPSERVE_WORKER_MODELS_MODEL_RUNNER_H_

#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/kv_cache.h"
#include "worker/loader/hf_config.h"
#include "worker/models/llama.h"
#include "worker/sampling/step_logits.h"
#include "worker/step_batch.h"
#include "worker/tensor.h"

namespace tpserve {

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;

  virtual const ModelConfig& config() const = 0;
  // This rank's cache geometry for `num_blocks` blocks (bytes() sizes a budget).
  virtual KvCacheShape CacheShape(int num_blocks, int block_size) const = 0;
  // Drops the current cache and allocates one of `num_blocks` blocks; contents undefined.
  virtual absl::Status AllocateCache(int num_blocks, int block_size) = 0;
  // The allocated cache's geometry (num_blocks 0 before AllocateCache).
  virtual const KvCacheShape& cache_shape() const = 0;

  // Runs one step (batch.Validate against cache_shape() first). Returns host logits
  // [batch.NumLogitRows(), vocab_size] in fp32, identical on every rank.
  virtual absl::StatusOr<Tensor> Forward(const StepBatch& batch) = 0;

  // Runs one step for the rank executor, leaving the logits where this backend scores
  // them best. `sampling`: whether this rank will score them (rank 0); other ranks may
  // get logits that refuse to be scored. Default: Forward, scored on the host.
  virtual absl::StatusOr<std::unique_ptr<StepLogits>> ForwardForSampling(const StepBatch& batch,
                                                                        bool sampling);
};

// The CPU backend: LlamaModel over a host KvCache of fp32 or bf16 elements
// (kv_bytes_per_element 4 or 2).
class CpuModelRunner : public ModelRunner {
 public:
  // Takes ownership of `model`.
  explicit CpuModelRunner(std::unique_ptr<LlamaModel> model, int kv_bytes_per_element = 4)
      : owned_(std::move(model)), model_(owned_.get()), kv_bytes_(kv_bytes_per_element) {}
  // Borrows `model`, which must outlive the runner.
  explicit CpuModelRunner(const LlamaModel* model, int kv_bytes_per_element = 4)
      : model_(model), kv_bytes_(kv_bytes_per_element) {}

  const ModelConfig& config() const override { return model_->config(); }
  KvCacheShape CacheShape(int num_blocks, int block_size) const override {
    return model_->CacheShape(num_blocks, block_size, kv_bytes_);
  }
  absl::Status AllocateCache(int num_blocks, int block_size) override;
  const KvCacheShape& cache_shape() const override { return shape_; }
  absl::StatusOr<Tensor> Forward(const StepBatch& batch) override;

 private:
  std::unique_ptr<LlamaModel> owned_;
  const LlamaModel* model_;
  int kv_bytes_;
  KvCacheShape shape_;
  std::optional<KvCache> cache_;
};

}  // namespace tpserve

#endif  // TPSERVE_WORKER_MODELS_MODEL_RUNNER_H_
