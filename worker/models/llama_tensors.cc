#include "worker/models/llama_tensors.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "worker/dtype.h"

namespace tpserve {
namespace {

// How a tensor is split over the ranks, for RankWeightBytes.
enum class Split { kRows, kKvRows, kColumns, kVocab, kReplicated };

struct Planned {
  ExpectedTensor tensor;
  Split split;
};

std::vector<Planned> Plan(const ModelConfig& c) {
  const int64_t h = c.hidden_size, i = c.intermediate_size, d = c.head_dim;
  const int64_t q = int64_t{c.num_attention_heads} * d, kv = int64_t{c.num_key_value_heads} * d;
  std::vector<Planned> out;
  auto add = [&out](std::string name, Shape shape, Split split) {
    out.push_back({{std::move(name), std::move(shape)}, split});
  };
  add("model.embed_tokens.weight", {c.vocab_size, h}, Split::kVocab);
  for (int layer = 0; layer < c.num_hidden_layers; ++layer) {
    const std::string p = absl::StrCat("model.layers.", layer, ".");
    const std::string attn = p + "self_attn.";
    add(attn + "q_proj.weight", {q, h}, Split::kRows);
    if (HasQkvBias(c)) add(attn + "q_proj.bias", {q}, Split::kRows);
    for (const char* kv_proj : {"k_proj.", "v_proj."}) {
      add(attn + kv_proj + "weight", {kv, h}, Split::kKvRows);
      if (HasQkvBias(c)) add(attn + kv_proj + "bias", {kv}, Split::kKvRows);
    }
    add(attn + "o_proj.weight", {h, q}, Split::kColumns);
    if (HasOProjBias(c)) add(attn + "o_proj.bias", {h}, Split::kReplicated);
    if (c.qk_norm) {
      add(attn + "q_norm.weight", {d}, Split::kReplicated);
      add(attn + "k_norm.weight", {d}, Split::kReplicated);
    }
    const std::string mlp = p + "mlp.";
    for (const char* proj : {"gate_proj.", "up_proj."}) {
      add(mlp + proj + "weight", {i, h}, Split::kRows);
      if (c.mlp_bias) add(mlp + proj + "bias", {i}, Split::kRows);
    }
    add(mlp + "down_proj.weight", {h, i}, Split::kColumns);
    if (c.mlp_bias) add(mlp + "down_proj.bias", {h}, Split::kReplicated);
    add(p + "input_layernorm.weight", {h}, Split::kReplicated);
    add(p + "post_attention_layernorm.weight", {h}, Split::kReplicated);
  }
  add("model.norm.weight", {h}, Split::kReplicated);
  if (!c.tie_word_embeddings) add("lm_head.weight", {c.vocab_size, h}, Split::kVocab);
  return out;
}

// "a, b, c and 7 more" of the first few names.
std::string SomeNames(const std::vector<std::string>& names) {
  constexpr size_t kShown = 4;
  std::vector<std::string> shown(names.begin(),
                                 names.begin() + std::min(kShown, names.size()));
  std::string out = absl::StrJoin(shown, ", ");
  if (names.size() > kShown) absl::StrAppend(&out, " and ", names.size() - kShown, " more");
  return out;
}

}  // namespace

bool HasQkvBias(const ModelConfig& config) {
  return config.family == ModelFamily::kQwen2 ||
         (config.attention_bias && config.family != ModelFamily::kMistral);
}

bool HasOProjBias(const ModelConfig& config) {
  return config.attention_bias && config.family != ModelFamily::kQwen2 &&
         config.family != ModelFamily::kMistral;
}

std::vector<ExpectedTensor> LlamaCheckpointTensors(const ModelConfig& config) {
  std::vector<ExpectedTensor> out;
  for (Planned& p : Plan(config)) out.push_back(std::move(p.tensor));
  return out;
}

bool IsIgnorableTensor(const std::string& name) {
  return absl::EndsWith(name, ".rotary_emb.inv_freq");
}

absl::Status CheckCheckpointTensors(const ModelConfig& config, const Checkpoint& checkpoint,
                                    const std::string& dir) {
  const std::vector<ExpectedTensor> expected = LlamaCheckpointTensors(config);
  std::set<std::string> wanted;
  std::vector<std::string> missing;
  for (const ExpectedTensor& e : expected) {
    wanted.insert(e.name);
    if (!checkpoint.Contains(e.name)) {
      missing.push_back(e.name);
      continue;
    }
    TPSERVE_ASSIGN_OR_RETURN(const TensorView view, checkpoint.Get(e.name));
    if (view.shape != e.shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          dir, ": tensor ", e.name, " in ", view.file, " has shape ", ShapeToString(view.shape),
          ", but config.json gives ", ShapeToString(e.shape)));
    }
    if (!IsFloatWeightType(view.dtype)) {
      return absl::InvalidArgumentError(absl::StrCat(dir, ": tensor ", e.name, " in ", view.file,
                                                     " has dtype ", DTypeName(view.dtype),
                                                     "; weights must be F32, BF16 or F16"));
    }
  }
  if (!missing.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        dir, ": config.json (", config.architecture, ", ", config.num_hidden_layers,
        " layers) needs ", missing.size(), " tensor(s) the checkpoint does not have: ",
        SomeNames(missing)));
  }
  std::vector<std::string> unexpected;
  for (const std::string& name : checkpoint.TensorNames()) {
    if (wanted.count(name) == 0 && !IsIgnorableTensor(name)) unexpected.push_back(name);
  }
  if (!unexpected.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        dir, ": the checkpoint has ", unexpected.size(),
        " tensor(s) that config.json does not account for, which would be served without: ",
        SomeNames(unexpected),
        " (a config key such as mlp_bias or attention_bias may be missing)"));
  }
  return absl::OkStatus();
}

RankWeightValues CountRankWeightValues(const ModelConfig& config, int tp) {
  tp = std::max(tp, 1);
  const int64_t kv_heads = config.num_key_value_heads;
  // Each rank holds max(kv_heads / tp, 1) kv heads (replicated when tp exceeds them).
  const int64_t kv_heads_per_rank = std::max<int64_t>(kv_heads / tp, 1);
  const int64_t padded_vocab = (int64_t{config.vocab_size} + tp - 1) / tp;
  RankWeightValues v;
  for (const Planned& p : Plan(config)) {
    const int64_t n = NumElements(p.tensor.shape);
    int64_t values = 0;
    switch (p.split) {
      case Split::kRows:
      case Split::kColumns:
        values = n / tp;
        break;
      case Split::kKvRows:
        values = n / kv_heads * kv_heads_per_rank;
        break;
      case Split::kVocab:
        values = n / config.vocab_size * padded_vocab;
        break;
      case Split::kReplicated:
        values = n;
        break;
    }
    if (p.split == Split::kVocab) {
      (p.tensor.name == "lm_head.weight" ? v.lm_head : v.embedding) += values;
    } else if (p.tensor.shape.size() == 2) {
      v.linear += values;
    } else {
      v.other += values;
    }
  }
  v.layer_linear = config.num_hidden_layers > 0 ? v.linear / config.num_hidden_layers : 0;
  return v;
}

int64_t RankWeightBytes(const ModelConfig& config, int tp, int bytes_per_value) {
  return CountRankWeightValues(config, tp).total() * bytes_per_value;
}

}  // namespace tpserve
