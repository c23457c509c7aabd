// The attention and MLP blocks of the Llama family (Llama, Mistral, Qwen2, Qwen3),
// composed from the parallel layers. A block owns no collectives of its own: its
// QKVParallelLinear/MergedColumnParallelLinear split the heads and the intermediate
// dim, and its RowParallelLinear all-reduces. Built and used by one rank's thread.
#ifndef TPSERVE_WORKER_MODELS_LLAMA_LAYERS_H_
#define TPSERVE_WORKER_MODELS_LLAMA_LAYERS_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/status_macros.h"
#include "worker/comm/comm_group.h"
#include "worker/kernels/cpu/packed_weight.h"
#include "worker/kernels/cpu/paged_attention.h"
#include "worker/kernels/cpu/rope.h"
#include "worker/kv_cache.h"
#include "worker/layers/linear.h"
#include "worker/loader/checkpoint.h"
#include "worker/loader/hf_config.h"
#include "worker/loader/safetensors.h"
#include "worker/step_batch.h"
#include "worker/tensor.h"

namespace tpserve {

// Reads checkpoint tensors for the layers' WeightLoaders, as fp32 through one scratch
// tensor reused from tensor to tensor (loading allocates and page-faults the largest
// tensor's worth once rather than every tensor anew), or, for the bf16 loaders, as a
// view of the mapping from which each layer converts only its own slice. After each
// tensor its mapped pages leave the resident set (ReleaseTensorPages).
// One loading thread.
class WeightReader {
 public:
  explicit WeightReader(const Checkpoint& ckpt) : ckpt_(ckpt) {}
  // Reads `name`, checks its full HF shape, and hands it to `load` (valid only during the
  // call) as a const Tensor& (fp32); load's error comes back prefixed with the name.
  template <typename LoadFn>
  absl::Status Load(const std::string& name, const Shape& shape, LoadFn load) {
    TPSERVE_ASSIGN_OR_RETURN(const TensorView view, ckpt_.Get(name));
    absl::Status s = TensorViewToFloatInto(view, shape, &scratch_);
    if (s.ok()) s = Prefixed(name, load(static_cast<const Tensor&>(scratch_)));
    ReleaseTensorPages(view);
    return s;
  }
  // The same with a const WeightView& (the tensor where it is mapped) for `load`, which
  // converts the slice it keeps (the bf16 loaders).
  template <typename LoadFn>
  absl::Status LoadView(const std::string& name, const Shape& shape, LoadFn load) {
    TPSERVE_ASSIGN_OR_RETURN(const TensorView view, ckpt_.Get(name));
    absl::StatusOr<WeightView> weight = TensorViewToWeight(view, shape);
    absl::Status s = weight.status();
    if (s.ok()) s = Prefixed(name + " in " + view.file, load(static_cast<const WeightView&>(*weight)));
    ReleaseTensorPages(view);
    return s;
  }

 private:
  static absl::Status Prefixed(const std::string& name, const absl::Status& s) {
    if (s.ok()) return s;
    return absl::Status(s.code(), name + ": " + std::string(s.message()));
  }

  const Checkpoint& ckpt_;
  Tensor scratch_;
};

// How the CPU backend holds the weights it computes with: fp32; or the linear layers'
// weights (and the embedding table) in bf16, loaded without any fp32 copy; or
// kInt8 (weight-only quantization): loaded through the bf16 loaders, every linear weight
// and the LM head quantized to int8 with one fp32 scale per output row as its rows are
// read (rounded to bf16 first), no bf16 copy of a weight held (the embedding table stays
// bf16: a lookup reads one row, not the table).
enum class CpuWeights { kFloat32, kBFloat16, kInt8 };

// Whether `weights` loads through the layers' bf16 loaders (kBFloat16 and kInt8).
inline bool LoadsBf16(CpuWeights weights) { return weights != CpuWeights::kFloat32; }
// The tools' --dtype and --quantization flags as CpuWeights: int8 whatever the dtype
// (its embedding table is bf16 anyway), else bf16 for "bfloat16" and fp32 otherwise
// (the caller checks the dtype's name); a quantization other than "none" or "int8" is
// InvalidArgument naming the flag.
absl::StatusOr<CpuWeights> ParseCpuWeights(const std::string& dtype,
                                           const std::string& quantization);
// The format the linear layers pack their weights in; nullopt for kFloat32.
std::optional<WeightFormat> PackedWeightFormat(CpuWeights weights);

// The tensors one step's attention layers share: positions and cache slots.
struct AttentionInputs {
  const StepBatch* batch;
  std::vector<int32_t> positions;  // [num_tokens]
  std::vector<int64_t> slots;      // [num_tokens]
  std::vector<uint8_t> rope_long;  // [num_tokens] (longrope's long set), or empty
};

class LlamaAttention {
 public:
  static absl::StatusOr<std::unique_ptr<LlamaAttention>> Create(const ModelConfig& config,
                                                                CommGroup* comm,
                                                                const RotaryEmbedding* rope,
                                                                int layer);
  // prefix: "model.layers.{i}.self_attn."; kBFloat16 and kInt8 load the weights
  // through the layers' bf16 loaders (biases and norms stay fp32).
  absl::Status LoadWeights(WeightReader& reader, const std::string& prefix,
                           CpuWeights weights = CpuWeights::kFloat32);
  // qkv and o_proj packed in `format` (ColumnParallelLinear::PackWeight).
  absl::Status PackWeights(WeightFormat format);
  // x: [n, hidden] -> [n, hidden], all-reduced.
  absl::StatusOr<Tensor> Forward(const Tensor& x, const AttentionInputs& in, KvCache& cache) const;

  int64_t num_kv_heads() const { return qkv_->num_kv_heads(); }
  const AttentionParams& params() const { return params_; }
  const QKVParallelLinear& qkv() const { return *qkv_; }
  const RowParallelLinear& o_proj() const { return *o_proj_; }
  const Tensor& q_norm() const { return q_norm_; }  // [d], empty unless qk_norm
  const Tensor& k_norm() const { return k_norm_; }  // [d], empty unless qk_norm

 private:
  LlamaAttention() = default;
  const ModelConfig* config_ = nullptr;
  const RotaryEmbedding* rope_ = nullptr;
  int layer_ = 0;
  AttentionParams params_;
  std::unique_ptr<QKVParallelLinear> qkv_;  // [n, (n_q + n_kv)·d + n_kv·dv]
  std::unique_ptr<RowParallelLinear> o_proj_;
  Tensor q_norm_, k_norm_;  // [d] each, Qwen3 only
};

class LlamaMlp {
 public:
  static absl::StatusOr<std::unique_ptr<LlamaMlp>> Create(const ModelConfig& config,
                                                          CommGroup* comm);
  // prefix: "model.layers.{i}.mlp."; weights as LlamaAttention::LoadWeights.
  absl::Status LoadWeights(WeightReader& reader, const std::string& prefix,
                           CpuWeights weights = CpuWeights::kFloat32);
  // gate_up and down packed in `format`.
  absl::Status PackWeights(WeightFormat format);
  // x: [n, hidden] -> [n, hidden], all-reduced.
  absl::StatusOr<Tensor> Forward(const Tensor& x) const;

  const MergedColumnParallelLinear& gate_up() const { return *gate_up_; }
  const RowParallelLinear& down() const { return *down_; }

 private:
  LlamaMlp() = default;
  int64_t hidden_ = 0, intermediate_ = 0;
  Activation act_ = Activation::kSilu;  // config.json's hidden_act
  std::unique_ptr<MergedColumnParallelLinear> gate_up_;  // [n, 2·I/T]
  std::unique_ptr<RowParallelLinear> down_;
};

}  // namespace tpserve

#endif  // TPSERVE_WORKER_MODELS_LLAMA_LAYERS_H_
