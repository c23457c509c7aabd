#include "worker/models/llama.h"

#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "worker/kernels/cpu/norm_activation.h"
#include "worker/kernels/cpu/vec_math.h"

namespace tpserve {
namespace {

absl::Status LoadNorm(WeightReader& reader, const std::string& name, int64_t dim, Tensor& dst) {
  return reader.Load(name, {dim}, [&](const Tensor& t) {
    dst = t;
    return absl::OkStatus();
  });
}

}  // namespace

LlamaModel::LlamaModel(const ModelConfig& config)
    : config_(config), rope_(config.head_dim, config.rope_theta, config.rope_scaling) {}

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Create(const ModelConfig& config,
                                                               CommGroup* comm) {
  TPSERVE_RETURN_IF_ERROR(config.Validate());
  TPSERVE_RETURN_IF_ERROR(config.ValidateTp(comm->size()));
  std::unique_ptr<LlamaModel> model(new LlamaModel(config));
  const ModelConfig& c = model->config_;  // layers keep pointers to the model's copy
  TPSERVE_ASSIGN_OR_RETURN(model->embed_,
                           VocabParallelEmbedding::Create(c.vocab_size, c.hidden_size, comm));
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    DecoderLayer layer;
    TPSERVE_ASSIGN_OR_RETURN(auto attn, LlamaAttention::Create(c, comm, &model->rope_, i));
    TPSERVE_ASSIGN_OR_RETURN(auto mlp, LlamaMlp::Create(c, comm));
    layer.attn = std::move(attn);
    layer.mlp = std::move(mlp);
    layer.input_norm = Tensor({c.hidden_size});
    layer.post_attn_norm = Tensor({c.hidden_size});
    model->layers_.push_back(std::move(layer));
  }
  model->final_norm_ = Tensor({c.hidden_size});
  TPSERVE_ASSIGN_OR_RETURN(
      auto head, ParallelLMHead::Create(c.hidden_size, c.vocab_size, comm,
                                        c.tie_word_embeddings ? model->embed_.get() : nullptr));
  model->lm_head_ = std::move(head);
  return model;
}

absl::Status LlamaModel::LoadWeights(const Checkpoint& ckpt, CpuWeights weights) {
  const int64_t hidden = config_.hidden_size, vocab = config_.vocab_size;
  const bool bf16 = LoadsBf16(weights);
  const std::optional<WeightFormat> format = PackedWeightFormat(weights);
  WeightReader reader(ckpt);
  const Shape table = {vocab, hidden};
  TPSERVE_RETURN_IF_ERROR(
      bf16 ? reader.LoadView("model.embed_tokens.weight", table,
                             [&](const WeightView& t) { return embed_->WeightLoaderBf16(t); })
           : reader.Load("model.embed_tokens.weight", table, [&](const Tensor& t) {
               return embed_->WeightLoader(embed_->weight(), t);
             }));
  for (size_t i = 0; i < layers_.size(); ++i) {
    const std::string prefix = absl::StrCat("model.layers.", i, ".");
    DecoderLayer& layer = layers_[i];
    TPSERVE_RETURN_IF_ERROR(layer.attn->LoadWeights(reader, prefix + "self_attn.", weights));
    TPSERVE_RETURN_IF_ERROR(layer.mlp->LoadWeights(reader, prefix + "mlp.", weights));
    TPSERVE_RETURN_IF_ERROR(
        LoadNorm(reader, prefix + "input_layernorm.weight", hidden, layer.input_norm));
    TPSERVE_RETURN_IF_ERROR(
        LoadNorm(reader, prefix + "post_attention_layernorm.weight", hidden, layer.post_attn_norm));
    if (format.has_value()) {
      TPSERVE_RETURN_IF_ERROR(layer.attn->PackWeights(*format));
      TPSERVE_RETURN_IF_ERROR(layer.mlp->PackWeights(*format));
    }
  }
  TPSERVE_RETURN_IF_ERROR(LoadNorm(reader, "model.norm.weight", hidden, final_norm_));
  if (!config_.tie_word_embeddings) {
    TPSERVE_RETURN_IF_ERROR(
        format.has_value()
            ? reader.LoadView("lm_head.weight", table,
                              [&](const WeightView& t) {
                                return lm_head_->WeightLoaderPacked(t, *format);
                              })
            : reader.Load("lm_head.weight", table, [&](const Tensor& t) {
                return lm_head_->WeightLoader(lm_head_->weight(), t);
              }));
  }
  if (format.has_value()) TPSERVE_RETURN_IF_ERROR(lm_head_->PackWeight(*format));
  return absl::OkStatus();
}

KvCacheShape LlamaModel::CacheShape(int num_blocks, int block_size,
                                    int bytes_per_element) const {
  KvCacheShape shape;
  shape.bytes_per_element = bytes_per_element;
  shape.num_layers = config_.num_hidden_layers;
  shape.num_blocks = num_blocks;
  shape.block_size = block_size;
  shape.num_kv_heads = layers_.empty() ? 0 : static_cast<int>(layers_[0].attn->num_kv_heads());
  shape.head_dim = config_.head_dim;
  shape.v_head_dim = config_.head_dim;
  return shape;
}

absl::StatusOr<Tensor> LlamaModel::Forward(const StepBatch& batch, KvCache& cache) const {
  TPSERVE_RETURN_IF_ERROR(batch.Validate(cache.shape(), config_.max_position_embeddings));
  TPSERVE_ASSIGN_OR_RETURN(Tensor hidden,
                           embed_->Forward(batch.token_ids));  // [n, H]: the residual
  const int64_t n = hidden.dim(0), h = config_.hidden_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  AttentionInputs in{&batch, batch.Positions(), batch.Slots(cache.shape().block_size),
                     rope_.LongFactorFlags(batch)};
  Tensor normed = Tensor::Uninitialized({n, h});  // [n, H], written whole by each norm
  // A layer's MLP output joins the residual in the next layer's input norm, one pass over
  // the rows instead of two; the last one after the loop.
  Tensor mlp;  // [n, H]; empty before the first layer
  for (const DecoderLayer& layer : layers_) {
    if (mlp.empty()) {
      RmsNorm(hidden.data(), layer.input_norm.data(), n, h, eps, normed.data());
    } else {
      AddRmsNorm(hidden.data(), mlp.data(), layer.input_norm.data(), n, h, eps, normed.data());
    }
    TPSERVE_ASSIGN_OR_RETURN(Tensor attn, layer.attn->Forward(normed, in, cache));  // [n, H]
    AddRmsNorm(hidden.data(), attn.data(), layer.post_attn_norm.data(), n, h, eps, normed.data());
    TPSERVE_ASSIGN_OR_RETURN(mlp, layer.mlp->Forward(normed));  // [n, H]
  }
  if (!mlp.empty()) AddInto(hidden.data(), mlp.data(), n * h);
  // Only the rows that need logits go through the final norm and the LM head.
  Tensor selected({batch.NumLogitRows(), h});  // [rows, H]
  int64_t token = 0, row = 0;
  for (const SequenceStep& seq : batch.seqs) {
    const int64_t first = seq.all_logits ? token : token + seq.num_new_tokens - 1;
    for (int64_t t = first; t < token + seq.num_new_tokens; ++t, ++row) {
      std::memcpy(selected.row(row), hidden.row(t), h * sizeof(float));
    }
    token += seq.num_new_tokens;
  }
  RmsNorm(selected.data(), final_norm_.data(), selected.dim(0), h, eps, selected.data());
  return lm_head_->Forward(selected);  // [rows, V]
}

}  // namespace tpserve
