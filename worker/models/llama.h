// LlamaModel: the tensor-parallel Llama-family decoder (Llama, Mistral, Qwen2, Qwen3).
//
//   VocabParallelEmbedding → L × [RMSNorm → attention → +residual → RMSNorm → MLP →
//   +residual] → RMSNorm → ParallelLMHead (gathered, vocab unpadded)
//
// One instance per rank, created with that rank's CommGroup; every rank must run
// Forward on identical StepBatches. Not thread-safe.
#ifndef TPSERVE_WORKER_MODELS_LLAMA_H_
#define TPSERVE_WORKER_MODELS_LLAMA_H_

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/comm/comm_group.h"
#include "worker/kernels/cpu/rope.h"
#include "worker/kv_cache.h"
#include "worker/layers/embedding.h"
#include "worker/loader/checkpoint.h"
#include "worker/loader/hf_config.h"
#include "worker/models/llama_layers.h"
#include "worker/step_batch.h"
#include "worker/tensor.h"

namespace tpserve {

class LlamaModel {
 public:
  // Validates the config for comm->size() ranks and builds this rank's shards (zeroed).
  static absl::StatusOr<std::unique_ptr<LlamaModel>> Create(const ModelConfig& config,
                                                            CommGroup* comm);

  // Loads every tensor the model needs from `ckpt`, each layer cutting its own slice.
  // kBFloat16 (the CPU backend's bf16 mode): the embedding's table and every linear
  // weight come through the layers' bf16 loaders (a BF16 checkpoint's tensors read where
  // they are mapped, F32/F16 ones rounded), so no fp32 copy of a weight exists at any
  // time; each decoder layer's weights are packed (PackWeight) as soon as that layer
  // has loaded, then the LM head (a tied one from the embedding's bf16 rows). Norms and
  // biases stay fp32. kInt8 loads as kBFloat16 but packs the linears and the LM head as
  // int8 (an F32 checkpoint's weights are thus rounded to bf16 before they are
  // quantized). Backends that copy the shards to a device load kFloat32.
  absl::Status LoadWeights(const Checkpoint& ckpt, CpuWeights weights = CpuWeights::kFloat32);

  // The KV cache geometry of this rank for `num_blocks` blocks of `block_size` tokens,
  // with elements of `bytes_per_element` (4: fp32, 2: bf16).
  KvCacheShape CacheShape(int num_blocks, int block_size, int bytes_per_element = 4) const;

  // Runs one step. Returns logits [batch.NumLogitRows(), vocab_size], identical on
  // every rank: for each sequence in order, one row per new token when all_logits,
  // else one row for its last token.
  absl::StatusOr<Tensor> Forward(const StepBatch& batch, KvCache& cache) const;

  const ModelConfig& config() const { return config_; }

  // The loaded shards, for backends that copy them to their device.
  const RotaryEmbedding& rope() const { return rope_; }
  const VocabParallelEmbedding& embedding() const { return *embed_; }
  int num_layers() const { return static_cast<int>(layers_.size()); }
  const LlamaAttention& attention(int layer) const { return *layers_[layer].attn; }
  const LlamaMlp& mlp(int layer) const { return *layers_[layer].mlp; }
  const Tensor& input_norm(int layer) const { return layers_[layer].input_norm; }          // [H]
  const Tensor& post_attn_norm(int layer) const { return layers_[layer].post_attn_norm; }  // [H]
  const Tensor& final_norm() const { return final_norm_; }                                 // [H]
  const ParallelLMHead& lm_head() const { return *lm_head_; }

 private:
  explicit LlamaModel(const ModelConfig& config);

  struct DecoderLayer {
    std::unique_ptr<LlamaAttention> attn;
    std::unique_ptr<LlamaMlp> mlp;
    Tensor input_norm;      // [hidden]
    Tensor post_attn_norm;  // [hidden]
  };

  ModelConfig config_;
  RotaryEmbedding rope_;
  std::unique_ptr<VocabParallelEmbedding> embed_;
  std::vector<DecoderLayer> layers_;
  Tensor final_norm_;  // [hidden]
  std::unique_ptr<ParallelLMHead> lm_head_;
};

}  // namespace tpserve

#endif  // TPSERVE_WORKER_MODELS_LLAMA_H_
