#include "worker/models/llama_layers.h"

#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "worker/kernels/cpu/norm_activation.h"
#include "worker/models/llama_tensors.h"

namespace tpserve {

absl::StatusOr<std::unique_ptr<LlamaAttention>> LlamaAttention::Create(
    const ModelConfig& config, CommGroup* comm, const RotaryEmbedding* rope, int layer) {
  const bool qkv_bias = HasQkvBias(config);  // the rules of llama_tensors.h
  TPSERVE_ASSIGN_OR_RETURN(
      auto qkv,
      QKVParallelLinear::Create(comm, config.hidden_size, config.head_dim,
                                config.num_attention_heads, config.num_key_value_heads, qkv_bias));
  const bool o_bias = HasOProjBias(config);
  TPSERVE_ASSIGN_OR_RETURN(
      auto o_proj,
      RowParallelLinear::Create(comm, int64_t{config.num_attention_heads} * config.head_dim,
                                config.hidden_size, o_bias));
  std::unique_ptr<LlamaAttention> attn(new LlamaAttention());
  attn->config_ = &config;
  attn->rope_ = rope;
  attn->layer_ = layer;
  attn->qkv_ = std::move(qkv);
  attn->o_proj_ = std::move(o_proj);
  attn->params_ = {attn->qkv_->num_heads(), attn->qkv_->num_kv_heads(), config.head_dim,
                   config.head_dim, static_cast<float>(1.0 / std::sqrt(double(config.head_dim))),
                   config.sliding_window};
  if (config.qk_norm) {
    attn->q_norm_ = Tensor({config.head_dim});
    attn->k_norm_ = Tensor({config.head_dim});
  }
  return attn;
}

absl::Status LlamaAttention::LoadWeights(WeightReader& reader, const std::string& prefix,
                                         CpuWeights weights) {
  const bool bf16 = LoadsBf16(weights);
  const int64_t hidden = config_->hidden_size, d = config_->head_dim;
  const int64_t q_rows = int64_t{config_->num_attention_heads} * d;
  const int64_t kv_rows = int64_t{config_->num_key_value_heads} * d;
  const Shape rows[] = {{q_rows}, {kv_rows}, {kv_rows}};
  const char* names[] = {"q", "k", "v"};
  if (weights == CpuWeights::kInt8) {  // quantized as the rows are read: no bf16 staging
    TPSERVE_RETURN_IF_ERROR(qkv_->LoadAsInt8());
    TPSERVE_RETURN_IF_ERROR(o_proj_->LoadAsInt8());
  }
  for (int i = 0; i < 3; ++i) {
    const std::string proj = prefix + names[i] + "_proj.";
    const Shape shape = {rows[i][0], hidden};
    const ShardId id = std::string(names[i]);
    TPSERVE_RETURN_IF_ERROR(
        bf16 ? reader.LoadView(proj + "weight", shape,
                               [&](const WeightView& t) { return qkv_->WeightLoaderBf16(t, id); })
             : reader.Load(proj + "weight", shape, [&](const Tensor& t) {
                 return qkv_->WeightLoader(qkv_->weight(), t, id);
               }));
    if (qkv_->bias() == nullptr) continue;
    TPSERVE_RETURN_IF_ERROR(reader.Load(proj + "bias", rows[i], [&](const Tensor& t) {
      return qkv_->WeightLoader(*qkv_->bias(), t, std::string(names[i]));
    }));
  }
  const Shape o_shape = {hidden, q_rows};
  TPSERVE_RETURN_IF_ERROR(
      bf16 ? reader.LoadView(prefix + "o_proj.weight", o_shape,
                             [&](const WeightView& t) { return o_proj_->WeightLoaderBf16(t); })
           : reader.Load(prefix + "o_proj.weight", o_shape, [&](const Tensor& t) {
               return o_proj_->WeightLoader(o_proj_->weight(), t);
             }));
  if (o_proj_->bias() != nullptr) {
    TPSERVE_RETURN_IF_ERROR(reader.Load(prefix + "o_proj.bias", {hidden}, [&](const Tensor& t) {
      return o_proj_->WeightLoader(*o_proj_->bias(), t);
    }));
  }
  if (!config_->qk_norm) return absl::OkStatus();
  for (auto [name, dst] : {std::pair<const char*, Tensor*>{"q_norm.weight", &q_norm_},
                           {"k_norm.weight", &k_norm_}}) {
    TPSERVE_RETURN_IF_ERROR(reader.Load(prefix + name, {d}, [&](const Tensor& t) {
      *dst = t;
      return absl::OkStatus();
    }));
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> LlamaAttention::Forward(const Tensor& x, const AttentionInputs& in,
                                               KvCache& cache) const {
  TPSERVE_ASSIGN_OR_RETURN(LinearOutput qkv, qkv_->Forward(x));  // [n, (n_q + n_kv)·d + n_kv·dv]
  const int64_t n = x.dim(0), d = params_.head_dim, nq = params_.num_heads;
  const int64_t nkv = params_.num_kv_heads, width = qkv.output.dim(1);
  // Copied whole from qkv's rows below.
  Tensor q = Tensor::Uninitialized({n, nq, d}), k = Tensor::Uninitialized({n, nkv, d});
  Tensor v = Tensor::Uninitialized({n, nkv, params_.v_head_dim});
  for (int64_t i = 0; i < n; ++i) {
    const float* row = qkv.output.row(i);
    std::memcpy(q.row(i), row, nq * d * sizeof(float));
    std::memcpy(k.row(i), row + nq * d, nkv * d * sizeof(float));
    std::memcpy(v.row(i), row + (nq + nkv) * d, (width - (nq + nkv) * d) * sizeof(float));
  }
  if (config_->qk_norm) {  // Qwen3: per-head RMSNorm before RoPE
    const float eps = static_cast<float>(config_->rms_norm_eps);
    RmsNorm(q.data(), q_norm_.data(), n * nq, d, eps, q.data());
    RmsNorm(k.data(), k_norm_.data(), n * nkv, d, eps, k.data());
  }
  rope_->Apply(in.positions, nq, q.data(), in.rope_long);
  rope_->Apply(in.positions, nkv, k.data(), in.rope_long);
  WriteKv(k.data(), v.data(), in.slots, layer_, cache);
  Tensor attn = Tensor::Uninitialized({n, nq * params_.v_head_dim});  // [n, n_q·dv], whole
  PagedAttention(q.data(), *in.batch, cache, layer_, params_, attn.data());
  TPSERVE_ASSIGN_OR_RETURN(LinearOutput out, o_proj_->Forward(attn));  // [n, hidden]
  return std::move(out.output);
}

absl::StatusOr<std::unique_ptr<LlamaMlp>> LlamaMlp::Create(const ModelConfig& config,
                                                           CommGroup* comm) {
  const int64_t hidden = config.hidden_size, inter = config.intermediate_size;
  // mlp_bias: gate/up biases split with their rows; down_proj's is added once, after the
  // all-reduce of the row-parallel partial sums.
  TPSERVE_ASSIGN_OR_RETURN(
      auto gate_up,
      MergedColumnParallelLinear::Create(comm, hidden, {inter, inter}, config.mlp_bias));
  TPSERVE_ASSIGN_OR_RETURN(auto down,
                           RowParallelLinear::Create(comm, inter, hidden, config.mlp_bias));
  std::unique_ptr<LlamaMlp> mlp(new LlamaMlp());
  mlp->hidden_ = hidden;
  mlp->intermediate_ = inter;
  mlp->act_ = config.hidden_act;
  mlp->gate_up_ = std::move(gate_up);
  mlp->down_ = std::move(down);
  return mlp;
}

absl::StatusOr<CpuWeights> ParseCpuWeights(const std::string& dtype,
                                           const std::string& quantization) {
  if (quantization == "int8") return CpuWeights::kInt8;
  if (quantization != "none") {
    return absl::InvalidArgumentError(
        absl::StrCat("--quantization ", quantization, ": expected none or int8"));
  }
  return dtype == "bfloat16" ? CpuWeights::kBFloat16 : CpuWeights::kFloat32;
}

std::optional<WeightFormat> PackedWeightFormat(CpuWeights weights) {
  switch (weights) {
    case CpuWeights::kFloat32:
      return std::nullopt;
    case CpuWeights::kBFloat16:
      return WeightFormat::kBf16;
    case CpuWeights::kInt8:
      return WeightFormat::kInt8;
  }
  return std::nullopt;
}

absl::Status LlamaAttention::PackWeights(WeightFormat format) {
  TPSERVE_RETURN_IF_ERROR(qkv_->PackWeight(format));
  return o_proj_->PackWeight(format);
}

absl::Status LlamaMlp::PackWeights(WeightFormat format) {
  TPSERVE_RETURN_IF_ERROR(gate_up_->PackWeight(format));
  return down_->PackWeight(format);
}

absl::Status LlamaMlp::LoadWeights(WeightReader& reader, const std::string& prefix,
                                   CpuWeights weights) {
  const bool bf16 = LoadsBf16(weights);
  if (weights == CpuWeights::kInt8) {  // quantized as the rows are read: no bf16 staging
    TPSERVE_RETURN_IF_ERROR(gate_up_->LoadAsInt8());
    TPSERVE_RETURN_IF_ERROR(down_->LoadAsInt8());
  }
  int shard = 0;
  for (const char* name : {"gate_proj.", "up_proj."}) {
    const Shape shape = {intermediate_, hidden_};
    TPSERVE_RETURN_IF_ERROR(
        bf16 ? reader.LoadView(prefix + name + "weight", shape,
                               [&](const WeightView& t) { return gate_up_->WeightLoaderBf16(t, shard); })
             : reader.Load(prefix + name + "weight", shape, [&](const Tensor& t) {
                 return gate_up_->WeightLoader(gate_up_->weight(), t, shard);
               }));
    if (gate_up_->bias() != nullptr) {
      TPSERVE_RETURN_IF_ERROR(reader.Load(
          prefix + name + "bias", {intermediate_},
          [&](const Tensor& t) { return gate_up_->WeightLoader(*gate_up_->bias(), t, shard); }));
    }
    ++shard;
  }
  const Shape down_shape = {hidden_, intermediate_};
  TPSERVE_RETURN_IF_ERROR(
      bf16 ? reader.LoadView(prefix + "down_proj.weight", down_shape,
                             [&](const WeightView& t) { return down_->WeightLoaderBf16(t); })
           : reader.Load(prefix + "down_proj.weight", down_shape, [&](const Tensor& t) {
               return down_->WeightLoader(down_->weight(), t);
             }));
  if (down_->bias() == nullptr) return absl::OkStatus();
  return reader.Load(prefix + "down_proj.bias", {hidden_},
                     [&](const Tensor& t) { return down_->WeightLoader(*down_->bias(), t); });
}

absl::StatusOr<Tensor> LlamaMlp::Forward(const Tensor& x) const {
  TPSERVE_ASSIGN_OR_RETURN(LinearOutput gate_up, gate_up_->Forward(x));  // [n, 2·I/T]
  const int64_t n = x.dim(0), width = gate_up.output.dim(1) / 2;
  Tensor act = Tensor::Uninitialized({n, width});  // [n, I/T], every element written
  ActMul(act_, gate_up.output.data(), n, width, act.data());
  TPSERVE_ASSIGN_OR_RETURN(LinearOutput down, down_->Forward(act));  // [n, hidden]
  return std::move(down.output);
}

}  // namespace tpserve
