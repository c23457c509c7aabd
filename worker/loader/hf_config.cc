#include "worker/loader/hf_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "base/json_fields.h"
#include "base/json_file.h"
#include "base/status_macros.h"
#include "worker/loader/checkpoint.h"

namespace tpserve {
namespace {

using nlohmann::json;

struct ArchitectureInfo {
  const char* name;
  ModelFamily family;
  int default_max_position_embeddings;  // the transformers config class defaults
};

constexpr ArchitectureInfo kArchitectures[] = {
    {"LlamaForCausalLM", ModelFamily::kLlama, 2048},
    {"MistralForCausalLM", ModelFamily::kMistral, 4096 * 32},
    {"Qwen2ForCausalLM", ModelFamily::kQwen2, 32768},
    {"Qwen3ForCausalLM", ModelFamily::kQwen3, 32768},
};

absl::Status ParseArchitecture(const JsonField& root, ModelConfig* c) {
  const JsonField list = root["architectures"];
  if (list.is_null()) return list.Missing();
  if (!list.value().is_array() || list.value().empty() || !list.value()[0].is_string()) {
    return list.Error("expected a non-empty list of strings");
  }
  c->architecture = list.value()[0].get<std::string>();
  for (const ArchitectureInfo& a : kArchitectures) {
    if (c->architecture == a.name) {
      c->family = a.family;
      c->max_position_embeddings = a.default_max_position_embeddings;
      return absl::OkStatus();
    }
  }
  return list.Error(absl::StrCat(
      "unsupported architecture \"", c->architecture,
      "\" (supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM)"));
}

// transformers' get_mscale: 0.1·mscale·ln(scale) + 1, or 1 for scale ≤ 1.
double YarnMscale(double scale, double mscale) {
  return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

// yarn as transformers 5 reads it: factor (null: max_position_embeddings /
// original_max_position_embeddings), attention_factor or the mscale pair, beta_fast and
// beta_slow (null or 0: 32 and 1), truncate. original_max_position_embeddings was
// already set (the rope parameters', config.json's top-level key, or
// max_position_embeddings).
absl::Status ParseYarn(const JsonField& field, int max_position_embeddings, RopeScaling* rope) {
  rope->type = RopeScaling::Type::kYarn;
  if (field["factor"].is_null()) {
    rope->factor = static_cast<double>(max_position_embeddings) /
                   rope->original_max_position_embeddings;
  } else {
    TPSERVE_ASSIGN_OR_RETURN(rope->factor, field["factor"].Double());
  }
  TPSERVE_ASSIGN_OR_RETURN(const double mscale, field["mscale"].DoubleOr(0));
  TPSERVE_ASSIGN_OR_RETURN(const double mscale_all_dim, field["mscale_all_dim"].DoubleOr(0));
  if (!field["attention_factor"].is_null()) {
    TPSERVE_ASSIGN_OR_RETURN(rope->attention_factor, field["attention_factor"].Double());
  } else if (mscale != 0 && mscale_all_dim != 0) {
    rope->attention_factor =
        YarnMscale(rope->factor, mscale) / YarnMscale(rope->factor, mscale_all_dim);
  } else {
    rope->attention_factor = YarnMscale(rope->factor, 1.0);
  }
  TPSERVE_ASSIGN_OR_RETURN(rope->beta_fast, field["beta_fast"].DoubleOr(0));
  TPSERVE_ASSIGN_OR_RETURN(rope->beta_slow, field["beta_slow"].DoubleOr(0));
  if (rope->beta_fast == 0) rope->beta_fast = 32;  // Python's `or 32`
  if (rope->beta_slow == 0) rope->beta_slow = 1;
  TPSERVE_ASSIGN_OR_RETURN(rope->truncate, field["truncate"].BoolOr(true));
  return absl::OkStatus();
}

// A list of positive finite numbers.
absl::Status ReadFactors(const JsonField& field, std::vector<double>* out) {
  TPSERVE_RETURN_IF_ERROR(field.ExpectArray());
  for (const json& v : field.value()) {
    if (!v.is_number() || !(v.get<double>() > 0) || !std::isfinite(v.get<double>())) {
      return field.Error(absl::StrCat("entry ", v.dump(), " is not a positive number"));
    }
    out->push_back(v.get<double>());
  }
  return absl::OkStatus();
}

// longrope as transformers 5 (_compute_longrope_parameters): long_factor and
// short_factor, factor (null: max_position_embeddings / original), attention_factor
// (null: sqrt(1 + ln factor / ln original), 1 for factor ≤ 1).
absl::Status ParseLongRope(const JsonField& field, int max_position_embeddings,
                           RopeScaling* rope) {
  rope->type = RopeScaling::Type::kLongRope;
  TPSERVE_RETURN_IF_ERROR(ReadFactors(field["long_factor"], &rope->long_factor));
  TPSERVE_RETURN_IF_ERROR(ReadFactors(field["short_factor"], &rope->short_factor));
  const double original = rope->original_max_position_embeddings;
  if (field["factor"].is_null()) {
    rope->factor = max_position_embeddings / original;
  } else {
    TPSERVE_ASSIGN_OR_RETURN(rope->factor, field["factor"].Double());
  }
  if (!field["attention_factor"].is_null()) {
    TPSERVE_ASSIGN_OR_RETURN(rope->attention_factor, field["attention_factor"].Double());
  } else {
    rope->attention_factor =
        rope->factor <= 1 ? 1.0 : std::sqrt(1 + std::log(rope->factor) / std::log(original));
  }
  return absl::OkStatus();
}

// `field` is "rope_scaling" (or transformers 5's "rope_parameters"), not null.
// `original_max_position_embeddings`: config.json's top-level key of that name (Phi-3
// style, which transformers prefers), else max_position_embeddings; the rope
// parameters' own key, when present, wins over the second only.
absl::Status ParseRopeScaling(const JsonField& field, int max_position_embeddings,
                              std::optional<int> top_level_original, RopeScaling* rope) {
  if (!field.value().is_object()) {
    return field.Error(
        absl::StrCat("expected an object or null, got ", JsonTypeName(field.value())));
  }
  TPSERVE_ASSIGN_OR_RETURN(std::string type, field["type"].StringOr("default"));
  TPSERVE_ASSIGN_OR_RETURN(type, field["rope_type"].StringOr(type));
  if (top_level_original.has_value()) {
    rope->original_max_position_embeddings = *top_level_original;
  } else if (type == "yarn" || type == "longrope") {
    TPSERVE_ASSIGN_OR_RETURN(rope->original_max_position_embeddings,
                             field["original_max_position_embeddings"].Int32Or(
                                 max_position_embeddings));
  }
  if (type == "default") {
    *rope = RopeScaling();
  } else if (type == "linear") {
    rope->type = RopeScaling::Type::kLinear;
    TPSERVE_ASSIGN_OR_RETURN(rope->factor, field["factor"].Double());
  } else if (type == "llama3") {
    rope->type = RopeScaling::Type::kLlama3;
    TPSERVE_ASSIGN_OR_RETURN(rope->factor, field["factor"].Double());
    TPSERVE_ASSIGN_OR_RETURN(rope->low_freq_factor, field["low_freq_factor"].Double());
    TPSERVE_ASSIGN_OR_RETURN(rope->high_freq_factor, field["high_freq_factor"].Double());
    if (!top_level_original.has_value()) {
      TPSERVE_ASSIGN_OR_RETURN(rope->original_max_position_embeddings,
                               field["original_max_position_embeddings"].Int32());
    }
  } else if (type == "yarn") {
    TPSERVE_RETURN_IF_ERROR(ParseYarn(field, max_position_embeddings, rope));
  } else if (type == "longrope") {
    TPSERVE_RETURN_IF_ERROR(ParseLongRope(field, max_position_embeddings, rope));
  } else if (type == "dynamic") {
    // Dynamic NTK rescales only for a forward pass longer than max_position_embeddings
    // (transformers starts its cache at that length), and no served context is longer:
    // within it the frequencies are the default ones.
    TPSERVE_ASSIGN_OR_RETURN(const double factor, field["factor"].Double());
    *rope = RopeScaling();
    rope->factor = factor;
  } else {
    return field["rope_type"].Error(
        absl::StrCat("rope scaling \"", type,
                     "\" is not supported (supported: default, linear, llama3, yarn, dynamic, "
                     "longrope)"),
        absl::StatusCode::kUnimplemented);
  }
  return absl::OkStatus();
}

absl::Status ParseRope(const JsonField& root, ModelConfig* c) {
  TPSERVE_ASSIGN_OR_RETURN(c->rope_theta, root["rope_theta"].DoubleOr(c->rope_theta));
  std::optional<int> original;
  if (!root["original_max_position_embeddings"].is_null()) {
    TPSERVE_ASSIGN_OR_RETURN(original, root["original_max_position_embeddings"].Int32());
  }
  if (!root["rope_scaling"].is_null()) {
    return ParseRopeScaling(root["rope_scaling"], c->max_position_embeddings, original,
                            &c->rope_scaling);
  }
  const JsonField params = root["rope_parameters"];
  if (!params.is_null()) {  // transformers 5 folds rope_theta in here
    TPSERVE_ASSIGN_OR_RETURN(c->rope_theta, params["rope_theta"].DoubleOr(c->rope_theta));
    return ParseRopeScaling(params, c->max_position_embeddings, original, &c->rope_scaling);
  }
  return absl::OkStatus();
}

absl::Status ParseDType(const JsonField& root, ModelConfig* c) {
  // "dtype" is the newer name (transformers >= 4.56); "torch_dtype" the older one.
  const JsonField dtype = root[root["dtype"].is_null() ? "torch_dtype" : "dtype"];
  c->torch_dtype_given = !dtype.is_null();
  TPSERVE_ASSIGN_OR_RETURN(std::string name, dtype.StringOr("float32"));
  if (name == "float32") {
    c->torch_dtype = DType::kF32;
  } else if (name == "bfloat16") {
    c->torch_dtype = DType::kBF16;
  } else if (name == "float16") {
    c->torch_dtype = DType::kF16;
  } else {
    return dtype.Error(absl::StrCat("unsupported dtype \"", name,
                                    "\" (supported: float32, bfloat16, float16)"));
  }
  return absl::OkStatus();
}

// `eos` ("eos_token_id"): an integer or a list of them, appended to `ids` (null: none).
absl::Status ParseEosTokenIds(const JsonField& eos, std::vector<int>* ids) {
  if (eos.is_null()) return absl::OkStatus();
  if (eos.value().is_number_integer()) {
    TPSERVE_ASSIGN_OR_RETURN(int id, eos.Int32());
    if (id < 0) return eos.Error(absl::StrCat("must be >= 0, got ", id));
    ids->push_back(id);
    return absl::OkStatus();
  }
  if (!eos.value().is_array()) {
    return eos.Error(absl::StrCat("expected an integer or a list of integers, got ",
                                  JsonTypeName(eos.value())));
  }
  for (const json& id : eos.value()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() > std::numeric_limits<int>::max()) {
      return eos.Error(absl::StrCat("list element ", id.dump(), " is not a non-negative integer"));
    }
    ids->push_back(id.get<int>());
  }
  return absl::OkStatus();
}

absl::Status ParseTokenIds(const JsonField& root, ModelConfig* c) {
  TPSERVE_ASSIGN_OR_RETURN(c->bos_token_id, root["bos_token_id"].Int32Or(c->bos_token_id));
  TPSERVE_ASSIGN_OR_RETURN(c->pad_token_id, root["pad_token_id"].Int32Or(c->pad_token_id));
  return ParseEosTokenIds(root["eos_token_id"], &c->eos_token_ids);
}

// Every key of config.json is one of these, or the file is refused naming it: a key
// tpserve does not know may change the computation (docs/config_keys.md gives the reason
// for each entry).
constexpr const char* kReadKeys[] = {
    "architectures", "hidden_size", "intermediate_size", "vocab_size", "num_hidden_layers",
    "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings",
    "rms_norm_eps", "rope_theta", "rope_scaling", "rope_parameters", "partial_rotary_factor",
    "original_max_position_embeddings",
    "tie_word_embeddings", "attention_bias", "mlp_bias", "hidden_act", "sliding_window",
    "use_sliding_window", "max_window_layers", "layer_types", "dtype", "torch_dtype",
    "bos_token_id", "eos_token_id", "pad_token_id", "quantization_config",
};
constexpr const char* kIgnoredKeys[] = {
    // Metadata and bookkeeping of transformers' PretrainedConfig.
    "_name_or_path", "name_or_path", "model_type", "transformers_version", "_commit_hash",
    "auto_map", "tokenizer_class", "finetuning_task", "task_specific_params", "problem_type",
    "id2label", "label2id", "num_labels", "prefix", "_attn_implementation",
    "attn_implementation", "_attn_implementation_autoset", "experts_implementation",
    "torchscript", "use_bfloat16", "tf_legacy_loss", "pruned_heads", "chunk_size_feed_forward",
    "is_encoder_decoder", "is_decoder", "add_cross_attention", "cross_attention_hidden_size",
    "tie_encoder_decoder", "return_dict", "output_attentions", "output_hidden_states",
    "output_scores", "return_dict_in_generate", "unsloth_version",
    // Training only: no effect on a forward pass in inference.
    "initializer_range", "attention_dropout", "hidden_dropout", "use_cache",
    "pretraining_tp",
    // Generation defaults of old configs (transformers moved them to generation_config.json);
    // tpserve's requests carry their own sampling.
    "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups",
    "diversity_penalty", "temperature", "top_k", "top_p", "typical_p", "repetition_penalty",
    "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids",
    "num_return_sequences", "forced_bos_token_id", "forced_eos_token_id",
    "remove_invalid_values", "exponential_decay_length_penalty", "suppress_tokens",
    "begin_suppress_tokens", "decoder_start_token_id", "sep_token_id",
};

bool Listed(absl::Span<const char* const> keys, const std::string& key) {
  return std::any_of(keys.begin(), keys.end(), [&](const char* k) { return key == k; });
}

// Quantized checkpoints first (their tensors would fail later, less clearly), then any
// key outside the two lists, then the read keys whose only supported value is the
// default.
absl::Status CheckKeys(const JsonField& root) {
  const JsonField quant = root["quantization_config"];
  if (!quant.is_null()) {
    std::string method = "unknown";
    if (quant.value().is_object() && quant.value().contains("quant_method") &&
        quant.value()["quant_method"].is_string()) {
      method = quant.value()["quant_method"].get<std::string>();
    }
    return quant.Error(absl::StrCat("quantized checkpoints (quant_method \"", method,
                                    "\") are not supported; serve the unquantized weights"),
                       absl::StatusCode::kUnimplemented);
  }
  for (const auto& [key, value] : root.value().items()) {
    if (Listed(kReadKeys, key) || Listed(kIgnoredKeys, key)) continue;
    return root[key].Error(
        "is not a key tpserve knows for this architecture; it may change the computation, "
        "so the model is refused rather than served without it (docs/config_keys.md)",
        absl::StatusCode::kUnimplemented);
  }
  TPSERVE_ASSIGN_OR_RETURN(double partial, root["partial_rotary_factor"].DoubleOr(1.0));
  if (partial != 1.0) {
    return root["partial_rotary_factor"].Error(
        absl::StrCat("is ", partial, "; only 1.0 (rotate every dimension) is supported"),
        absl::StatusCode::kUnimplemented);
  }
  return absl::OkStatus();
}

// Qwen2/Qwen3 as transformers 5 reads them: layer i attends within sliding_window when
// layer_types[i] is "sliding_attention" and the window is on (use_sliding_window and a
// non-null sliding_window); absent layer_types, layers i >= max_window_layers slide. The
// attention kernels take one window for every layer, so a mix is refused.
absl::Status ParseQwenLayerTypes(const JsonField& root, ModelConfig* c) {
  TPSERVE_ASSIGN_OR_RETURN(bool use_sliding_window, root["use_sliding_window"].BoolOr(false));
  int window = 0;
  if (use_sliding_window) {
    TPSERVE_ASSIGN_OR_RETURN(window, root["sliding_window"].Int32Or(0));
    if (!root.Has("sliding_window")) window = 4096;  // Qwen2Config's default
  }
  TPSERVE_ASSIGN_OR_RETURN(int max_window_layers, root["max_window_layers"].Int32Or(28));
  std::vector<bool> sliding(c->num_hidden_layers > 0 ? c->num_hidden_layers : 0);
  const JsonField types = root["layer_types"];
  if (types.is_null()) {
    for (size_t i = 0; i < sliding.size(); ++i) {
      sliding[i] = window > 0 && static_cast<int>(i) >= max_window_layers;
    }
  } else {
    TPSERVE_RETURN_IF_ERROR(types.ExpectArray());
    if (types.value().size() != sliding.size()) {
      return types.Error(absl::StrCat("has ", types.value().size(),
                                      " entries, num_hidden_layers is ", sliding.size()));
    }
    for (size_t i = 0; i < sliding.size(); ++i) {
      const json& t = types.value()[i];
      if (!t.is_string() || (t != "full_attention" && t != "sliding_attention")) {
        return types.Error(absl::StrCat("entry ", i, " is ", t.dump(),
                                        ", expected \"full_attention\" or \"sliding_attention\""));
      }
      sliding[i] = window > 0 && t == "sliding_attention";
    }
  }
  const size_t num_sliding = std::count(sliding.begin(), sliding.end(), true);
  if (num_sliding != 0 && num_sliding != sliding.size()) {
    return (types.is_null() ? root["max_window_layers"] : types)
        .Error(absl::StrCat("gives ", num_sliding, " of ", sliding.size(),
                            " layers a sliding window of ", window,
                            " and the others full attention; tpserve runs one kind for all "
                            "layers"),
               absl::StatusCode::kUnimplemented);
  }
  c->sliding_window = num_sliding > 0 ? window : 0;
  return absl::OkStatus();
}

// Family-specific attention layout: head_dim, biases, qk-norm and the sliding window.
// Runs after the sizes are read.
absl::Status ParseAttention(const JsonField& root, ModelConfig* c) {
  // Qwen3Config defaults head_dim to 128 when the key is absent; null (and absence in the
  // other families) means hidden_size / num_attention_heads.
  if (c->family == ModelFamily::kQwen3 && !root.Has("head_dim")) {
    c->head_dim = 128;
  } else if (c->num_attention_heads > 0) {
    c->head_dim = c->hidden_size / c->num_attention_heads;
  }
  TPSERVE_ASSIGN_OR_RETURN(c->head_dim, root["head_dim"].Int32Or(c->head_dim));

  // MistralAttention has no biases in transformers, but the key is honoured as the
  // Llama one is. Qwen2 always has q/k/v biases (and none on o_proj).
  TPSERVE_ASSIGN_OR_RETURN(c->attention_bias, root["attention_bias"].BoolOr(c->attention_bias));
  if (c->family == ModelFamily::kQwen2) c->attention_bias = true;
  c->qk_norm = c->family == ModelFamily::kQwen3;

  c->sliding_window = 0;
  if (c->family == ModelFamily::kMistral) {
    // MistralConfig's default is 4096 when absent; null means full attention.
    if (!root.Has("sliding_window")) c->sliding_window = 4096;
    TPSERVE_ASSIGN_OR_RETURN(c->sliding_window,
                             root["sliding_window"].Int32Or(c->sliding_window));
  } else if (c->family == ModelFamily::kQwen2 || c->family == ModelFamily::kQwen3) {
    return ParseQwenLayerTypes(root, c);
  }
  return absl::OkStatus();
}

// hidden_act (absent: silu, every supported family's default) and mlp_bias.
absl::Status ParseMlp(const JsonField& root, ModelConfig* c) {
  const JsonField act = root["hidden_act"];
  TPSERVE_ASSIGN_OR_RETURN(std::string name, act.StringOr("silu"));
  static constexpr std::pair<const char*, Activation> kActivations[] = {
      {"silu", Activation::kSilu},
      {"swish", Activation::kSilu},
      {"gelu", Activation::kGelu},
      {"gelu_pytorch_tanh", Activation::kGeluTanh},
      {"gelu_new", Activation::kGeluTanh},
      {"relu", Activation::kRelu},
  };
  bool known = false;
  for (const auto& [n, a] : kActivations) {
    if (name == n) c->hidden_act = a, known = true;
  }
  if (!known) {
    return act.Error(absl::StrCat("activation \"", name,
                                  "\" is not supported (supported: silu, swish, gelu, "
                                  "gelu_pytorch_tanh, gelu_new, relu)"),
                     absl::StatusCode::kUnimplemented);
  }
  // MistralMLP and the Qwen MLPs have no biases in transformers; LlamaMLP follows mlp_bias.
  if (c->family == ModelFamily::kLlama) {
    TPSERVE_ASSIGN_OR_RETURN(c->mlp_bias, root["mlp_bias"].BoolOr(false));
  }
  return absl::OkStatus();
}

absl::Status ParseFields(const JsonField& root, ModelConfig* c) {
  TPSERVE_RETURN_IF_ERROR(CheckKeys(root));
  TPSERVE_RETURN_IF_ERROR(ParseArchitecture(root, c));
  TPSERVE_ASSIGN_OR_RETURN(c->hidden_size, root["hidden_size"].Int32());
  TPSERVE_ASSIGN_OR_RETURN(c->intermediate_size, root["intermediate_size"].Int32());
  TPSERVE_ASSIGN_OR_RETURN(c->vocab_size, root["vocab_size"].Int32());
  TPSERVE_ASSIGN_OR_RETURN(c->num_hidden_layers, root["num_hidden_layers"].Int32());
  TPSERVE_ASSIGN_OR_RETURN(c->num_attention_heads, root["num_attention_heads"].Int32());
  TPSERVE_ASSIGN_OR_RETURN(c->num_key_value_heads,
                           root["num_key_value_heads"].Int32Or(c->num_attention_heads));
  TPSERVE_ASSIGN_OR_RETURN(c->max_position_embeddings,
                           root["max_position_embeddings"].Int32Or(c->max_position_embeddings));
  TPSERVE_ASSIGN_OR_RETURN(c->rms_norm_eps, root["rms_norm_eps"].DoubleOr(c->rms_norm_eps));
  TPSERVE_ASSIGN_OR_RETURN(c->tie_word_embeddings,
                           root["tie_word_embeddings"].BoolOr(c->tie_word_embeddings));
  TPSERVE_RETURN_IF_ERROR(ParseAttention(root, c));
  TPSERVE_RETURN_IF_ERROR(ParseMlp(root, c));
  TPSERVE_RETURN_IF_ERROR(ParseRope(root, c));
  TPSERVE_RETURN_IF_ERROR(ParseDType(root, c));
  return ParseTokenIds(root, c);
}

absl::Status Positive(const char* key, double value) {
  if (value > 0 && std::isfinite(value)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(key, "=", value, " must be positive"));
}

}  // namespace

absl::Status ModelConfig::Validate() const {
  const std::pair<const char*, double> positives[] = {
      {"hidden_size", hidden_size},
      {"intermediate_size", intermediate_size},
      {"vocab_size", vocab_size},
      {"num_hidden_layers", num_hidden_layers},
      {"num_attention_heads", num_attention_heads},
      {"num_key_value_heads", num_key_value_heads},
      {"head_dim", head_dim},
      {"max_position_embeddings", max_position_embeddings},
      {"rms_norm_eps", rms_norm_eps},
      {"rope_theta", rope_theta},
  };
  for (const auto& [key, value] : positives) TPSERVE_RETURN_IF_ERROR(Positive(key, value));
  // Ids outside the vocabulary could never match (eos) or be embedded (bos, pad).
  std::vector<std::pair<std::string, int>> ids = {{"bos_token_id", bos_token_id},
                                                  {"pad_token_id", pad_token_id}};
  for (int id : eos_token_ids) ids.push_back({"eos_token_id", id});
  for (const auto& [key, id] : ids) {
    if (id == -1 && key != "eos_token_id") continue;  // absent
    if (id < 0 || id >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          key, "=", id, " is outside the vocabulary [0, vocab_size=", vocab_size, ")"));
    }
  }
  if (num_attention_heads % num_key_value_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_key_value_heads=", num_key_value_heads,
                     " does not divide num_attention_heads=", num_attention_heads));
  }
  if (head_dim % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("head_dim=", head_dim, " must be even for rotary embeddings"));
  }
  if (sliding_window < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sliding_window=", sliding_window, " must be >= 0"));
  }
  if (rope_scaling.type != RopeScaling::Type::kNone) {
    TPSERVE_RETURN_IF_ERROR(Positive("rope_scaling.factor", rope_scaling.factor));
  }
  if (rope_scaling.type == RopeScaling::Type::kLongRope) {
    TPSERVE_RETURN_IF_ERROR(Positive("rope_scaling.original_max_position_embeddings",
                                     rope_scaling.original_max_position_embeddings));
    TPSERVE_RETURN_IF_ERROR(
        Positive("rope_scaling.attention_factor", rope_scaling.attention_factor));
    for (const auto* factors : {&rope_scaling.long_factor, &rope_scaling.short_factor}) {
      if (static_cast<int>(factors->size()) != head_dim / 2) {
        return absl::InvalidArgumentError(absl::StrCat(
            "rope_scaling.", factors == &rope_scaling.long_factor ? "long" : "short",
            "_factor has ", factors->size(), " entries, head_dim / 2 is ", head_dim / 2));
      }
    }
  }
  if (rope_scaling.type == RopeScaling::Type::kYarn) {
    TPSERVE_RETURN_IF_ERROR(Positive("rope_scaling.original_max_position_embeddings",
                                     rope_scaling.original_max_position_embeddings));
    TPSERVE_RETURN_IF_ERROR(
        Positive("rope_scaling.attention_factor", rope_scaling.attention_factor));
    TPSERVE_RETURN_IF_ERROR(Positive("rope_scaling.beta_fast", rope_scaling.beta_fast));
    TPSERVE_RETURN_IF_ERROR(Positive("rope_scaling.beta_slow", rope_scaling.beta_slow));
  }
  if (rope_scaling.type == RopeScaling::Type::kLlama3) {
    TPSERVE_RETURN_IF_ERROR(Positive("rope_scaling.low_freq_factor", rope_scaling.low_freq_factor));
    TPSERVE_RETURN_IF_ERROR(
        Positive("rope_scaling.original_max_position_embeddings",
                 rope_scaling.original_max_position_embeddings));
    if (rope_scaling.high_freq_factor <= rope_scaling.low_freq_factor) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rope_scaling.high_freq_factor=", rope_scaling.high_freq_factor,
          " must exceed low_freq_factor=", rope_scaling.low_freq_factor));
    }
  }
  return absl::OkStatus();
}

absl::Status ModelConfig::ValidateTp(int tp) const {
  if (tp < 1) return absl::InvalidArgumentError(absl::StrCat("tp=", tp, " must be >= 1"));
  auto does_not_divide = [tp](const char* what, int64_t count) {
    return absl::InvalidArgumentError(
        absl::StrCat("tp=", tp, " does not divide ", what, "=", count));
  };
  if (num_attention_heads % tp != 0) return does_not_divide("num_attention_heads", num_attention_heads);
  if (tp >= num_key_value_heads) {
    if (tp % num_key_value_heads != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tp=", tp, " is not a multiple of num_key_value_heads=",
                       num_key_value_heads, " (each kv head must be replicated evenly)"));
    }
  } else if (num_key_value_heads % tp != 0) {
    return does_not_divide("num_key_value_heads", num_key_value_heads);
  }
  if (intermediate_size % tp != 0) return does_not_divide("intermediate_size", intermediate_size);
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> ParseModelConfig(const std::string& json_text,
                                             const std::string& source) {
  TPSERVE_ASSIGN_OR_RETURN(json root,
                           ParseJsonObject(json_text, source, /*reject_duplicate_keys=*/false));
  ModelConfig config;
  TPSERVE_RETURN_IF_ERROR(ParseFields(JsonField(root, source), &config));
  if (absl::Status s = config.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", s.message()));
  }
  return config;
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& path) {
  TPSERVE_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  return ParseModelConfig(text, path);
}

absl::StatusOr<GenerationConfig> ParseGenerationConfig(const std::string& json_text,
                                                       const std::string& source, int vocab_size) {
  TPSERVE_ASSIGN_OR_RETURN(json root,
                           ParseJsonObject(json_text, source, /*reject_duplicate_keys=*/false));
  GenerationConfig config;
  const JsonField eos = JsonField(root, source)["eos_token_id"];
  TPSERVE_RETURN_IF_ERROR(ParseEosTokenIds(eos, &config.eos_token_ids));
  for (int id : config.eos_token_ids) {
    if (id >= vocab_size) {
      return eos.Error(absl::StrCat(id, " is outside the model's vocabulary [0, ", vocab_size,
                                    ") (vocab_size of config.json)"));
    }
  }
  const JsonField max_new = JsonField(root, source)["max_new_tokens"];
  if (!max_new.is_null()) {
    const int64_t most = std::numeric_limits<int32_t>::max();
    const absl::StatusOr<int64_t> n = max_new.Int();
    if (!n.ok() || *n < 1 || *n > most) {
      return max_new.Error(absl::StrCat("must be an integer in [1, ", most, "], got ",
                                        max_new.value().dump(), " (the length a generation defaults to)"));
    }
    config.max_new_tokens = static_cast<int32_t>(*n);
  }
  return config;
}

absl::StatusOr<GenerationConfig> LoadGenerationConfig(const std::string& path, int vocab_size) {
  std::error_code error;
  if (!std::filesystem::exists(path, error)) return GenerationConfig{};
  TPSERVE_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  return ParseGenerationConfig(text, path, vocab_size);
}

absl::StatusOr<DType> CheckpointDType(const ModelConfig& config, const std::string& model_dir) {
  if (config.torch_dtype_given) return config.torch_dtype;
  TPSERVE_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> checkpoint, Checkpoint::Open(model_dir));
  TPSERVE_ASSIGN_OR_RETURN(const TensorView embedding,
                           checkpoint->Get("model.embed_tokens.weight"));
  return embedding.dtype;
}

}  // namespace tpserve
