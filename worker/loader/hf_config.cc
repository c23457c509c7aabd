#include "worker/loader/hf_config.h"

#include <cmath>
#include <filesystem>
#include <limits>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "worker/loader/json_util.h"

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

// Typed access to the keys of one JSON object; errors name the source and the key.
// A key that is absent or null keeps the caller's default unless it is required.
class Fields {
 public:
  Fields(const json& object, std::string source, std::string prefix = "")
      : object_(object), source_(std::move(source)), prefix_(std::move(prefix)) {}

  // The key exists, possibly as null.
  bool Present(const char* key) const { return object_.contains(key); }
  // The key exists and is not null.
  bool Has(const char* key) const {
    auto it = object_.find(key);
    return it != object_.end() && !it->is_null();
  }
  const json& Get(const char* key) const { return object_.at(key); }

  absl::Status Error(const char* key, absl::string_view rule) const {
    return absl::InvalidArgumentError(
        absl::StrCat(source_, ": key \"", prefix_, key, "\": ", rule));
  }
  absl::Status Missing(const char* key) const {
    return absl::InvalidArgumentError(
        absl::StrCat(source_, ": missing required key \"", prefix_, key, "\""));
  }

  absl::Status Int(const char* key, int* out, bool required = false) const {
    if (!Has(key)) return required ? Missing(key) : absl::OkStatus();
    const json& v = Get(key);
    if (!v.is_number_integer()) {
      return Error(key, absl::StrCat("expected an integer, got ", JsonTypeName(v)));
    }
    if (v.is_number_unsigned() ? v.get<uint64_t>() > std::numeric_limits<int>::max()
                               : v.get<int64_t>() < std::numeric_limits<int>::min()) {
      return Error(key, absl::StrCat("value ", v.dump(), " is out of range"));
    }
    *out = v.get<int>();
    return absl::OkStatus();
  }

  absl::Status Double(const char* key, double* out, bool required = false) const {
    if (!Has(key)) return required ? Missing(key) : absl::OkStatus();
    const json& v = Get(key);
    if (!v.is_number()) return Error(key, absl::StrCat("expected a number, got ", JsonTypeName(v)));
    *out = v.get<double>();
    return absl::OkStatus();
  }

  absl::Status Bool(const char* key, bool* out) const {
    if (!Has(key)) return absl::OkStatus();
    const json& v = Get(key);
    if (!v.is_boolean()) return Error(key, absl::StrCat("expected a boolean, got ", JsonTypeName(v)));
    *out = v.get<bool>();
    return absl::OkStatus();
  }

  absl::Status String(const char* key, std::string* out) const {
    if (!Has(key)) return absl::OkStatus();
    const json& v = Get(key);
    if (!v.is_string()) return Error(key, absl::StrCat("expected a string, got ", JsonTypeName(v)));
    *out = v.get<std::string>();
    return absl::OkStatus();
  }

 private:
  const json& object_;
  std::string source_;
  std::string prefix_;
};

#define TPSERVE_RETURN_IF_ERROR(expr)          \
  do {                                         \
    absl::Status status_ = (expr);             \
    if (!status_.ok()) return status_;         \
  } while (0)

absl::Status ParseArchitecture(const json& root, const std::string& source, ModelConfig* c) {
  Fields f(root, source);
  if (!f.Has("architectures")) return f.Missing("architectures");
  const json& list = f.Get("architectures");
  if (!list.is_array() || list.empty() || !list[0].is_string()) {
    return f.Error("architectures", "expected a non-empty list of strings");
  }
  c->architecture = list[0].get<std::string>();
  for (const ArchitectureInfo& a : kArchitectures) {
    if (c->architecture == a.name) {
      c->family = a.family;
      c->max_position_embeddings = a.default_max_position_embeddings;
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      source, ": key \"architectures\": unsupported architecture \"", c->architecture,
      "\" (supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM)"));
}

// `object` is "rope_scaling" (or transformers 5's "rope_parameters"); `key` names it.
absl::Status ParseRopeScaling(const json& object, const std::string& source, const char* key,
                              RopeScaling* rope) {
  if (!object.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": key \"", key,
                                                   "\": expected an object or null, got ",
                                                   JsonTypeName(object)));
  }
  Fields f(object, source, absl::StrCat(key, "."));
  std::string type = "default";
  TPSERVE_RETURN_IF_ERROR(f.String("type", &type));
  TPSERVE_RETURN_IF_ERROR(f.String("rope_type", &type));
  if (type == "default") {
    *rope = RopeScaling();
  } else if (type == "linear") {
    rope->type = RopeScaling::Type::kLinear;
    TPSERVE_RETURN_IF_ERROR(f.Double("factor", &rope->factor, /*required=*/true));
  } else if (type == "llama3") {
    rope->type = RopeScaling::Type::kLlama3;
    TPSERVE_RETURN_IF_ERROR(f.Double("factor", &rope->factor, true));
    TPSERVE_RETURN_IF_ERROR(f.Double("low_freq_factor", &rope->low_freq_factor, true));
    TPSERVE_RETURN_IF_ERROR(f.Double("high_freq_factor", &rope->high_freq_factor, true));
    TPSERVE_RETURN_IF_ERROR(f.Int("original_max_position_embeddings",
                                  &rope->original_max_position_embeddings, true));
  } else {
    return absl::UnimplementedError(
        absl::StrCat(source, ": key \"", key, ".rope_type\": rope scaling \"", type,
                     "\" is not supported (supported: default, linear, llama3)"));
  }
  return absl::OkStatus();
}

absl::Status ParseRope(const Fields& f, const std::string& source, ModelConfig* c) {
  TPSERVE_RETURN_IF_ERROR(f.Double("rope_theta", &c->rope_theta));
  if (f.Has("rope_scaling")) {
    return ParseRopeScaling(f.Get("rope_scaling"), source, "rope_scaling", &c->rope_scaling);
  }
  if (f.Has("rope_parameters")) {  // transformers 5 folds rope_theta in here
    const json& params = f.Get("rope_parameters");
    if (params.is_object()) {
      Fields p(params, source, "rope_parameters.");
      TPSERVE_RETURN_IF_ERROR(p.Double("rope_theta", &c->rope_theta));
    }
    return ParseRopeScaling(params, source, "rope_parameters", &c->rope_scaling);
  }
  return absl::OkStatus();
}

absl::Status ParseDType(const Fields& f, ModelConfig* c) {
  // "dtype" is the newer name (transformers >= 4.56); "torch_dtype" the older one.
  const char* key = f.Has("dtype") ? "dtype" : "torch_dtype";
  std::string name = "float32";
  TPSERVE_RETURN_IF_ERROR(f.String(key, &name));
  if (name == "float32") {
    c->torch_dtype = DType::kF32;
  } else if (name == "bfloat16") {
    c->torch_dtype = DType::kBF16;
  } else if (name == "float16") {
    c->torch_dtype = DType::kF16;
  } else {
    return f.Error(key, absl::StrCat("unsupported dtype \"", name,
                                     "\" (supported: float32, bfloat16, float16)"));
  }
  return absl::OkStatus();
}

// "eos_token_id": an integer or a list of them, appended to `ids` (absent or null: none).
absl::Status ParseEosTokenIds(const Fields& f, std::vector<int>* ids) {
  if (!f.Has("eos_token_id")) return absl::OkStatus();
  const json& eos = f.Get("eos_token_id");
  if (eos.is_number_integer()) {
    int id = 0;
    TPSERVE_RETURN_IF_ERROR(f.Int("eos_token_id", &id));
    if (id < 0) return f.Error("eos_token_id", absl::StrCat("must be >= 0, got ", id));
    ids->push_back(id);
    return absl::OkStatus();
  }
  if (!eos.is_array()) {
    return f.Error("eos_token_id",
                   absl::StrCat("expected an integer or a list of integers, got ",
                                JsonTypeName(eos)));
  }
  for (const json& id : eos) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() > std::numeric_limits<int>::max()) {
      return f.Error("eos_token_id", absl::StrCat("list element ", id.dump(),
                                                  " is not a non-negative integer"));
    }
    ids->push_back(id.get<int>());
  }
  return absl::OkStatus();
}

absl::Status ParseTokenIds(const Fields& f, ModelConfig* c) {
  TPSERVE_RETURN_IF_ERROR(f.Int("bos_token_id", &c->bos_token_id));
  return ParseEosTokenIds(f, &c->eos_token_ids);
}

// Family-specific attention layout: head_dim, biases, qk-norm and the sliding window.
// Runs after the sizes are read.
absl::Status ParseAttention(const Fields& f, ModelConfig* c) {
  // Qwen3Config defaults head_dim to 128 when the key is absent; null (and absence in the
  // other families) means hidden_size / num_attention_heads.
  if (c->family == ModelFamily::kQwen3 && !f.Present("head_dim")) {
    c->head_dim = 128;
  } else if (c->num_attention_heads > 0) {
    c->head_dim = c->hidden_size / c->num_attention_heads;
  }
  TPSERVE_RETURN_IF_ERROR(f.Int("head_dim", &c->head_dim));

  // MistralAttention has no biases in transformers, but the key is honoured as the
  // Llama one is. Qwen2 always has q/k/v biases (and none on o_proj).
  TPSERVE_RETURN_IF_ERROR(f.Bool("attention_bias", &c->attention_bias));
  if (c->family == ModelFamily::kQwen2) c->attention_bias = true;
  c->qk_norm = c->family == ModelFamily::kQwen3;

  c->sliding_window = 0;
  if (c->family == ModelFamily::kMistral) {
    // MistralConfig's default is 4096 when absent; null means full attention.
    if (!f.Present("sliding_window")) c->sliding_window = 4096;
    TPSERVE_RETURN_IF_ERROR(f.Int("sliding_window", &c->sliding_window));
  } else if (c->family == ModelFamily::kQwen2 || c->family == ModelFamily::kQwen3) {
    bool use_sliding_window = false;
    TPSERVE_RETURN_IF_ERROR(f.Bool("use_sliding_window", &use_sliding_window));
    if (use_sliding_window) {
      c->sliding_window = 4096;
      TPSERVE_RETURN_IF_ERROR(f.Int("sliding_window", &c->sliding_window));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseFields(const json& root, const std::string& source, ModelConfig* c) {
  TPSERVE_RETURN_IF_ERROR(ParseArchitecture(root, source, c));
  Fields f(root, source);
  TPSERVE_RETURN_IF_ERROR(f.Int("hidden_size", &c->hidden_size, /*required=*/true));
  TPSERVE_RETURN_IF_ERROR(f.Int("intermediate_size", &c->intermediate_size, true));
  TPSERVE_RETURN_IF_ERROR(f.Int("vocab_size", &c->vocab_size, true));
  TPSERVE_RETURN_IF_ERROR(f.Int("num_hidden_layers", &c->num_hidden_layers, true));
  TPSERVE_RETURN_IF_ERROR(f.Int("num_attention_heads", &c->num_attention_heads, true));
  c->num_key_value_heads = c->num_attention_heads;
  TPSERVE_RETURN_IF_ERROR(f.Int("num_key_value_heads", &c->num_key_value_heads));
  TPSERVE_RETURN_IF_ERROR(f.Int("max_position_embeddings", &c->max_position_embeddings));
  TPSERVE_RETURN_IF_ERROR(f.Double("rms_norm_eps", &c->rms_norm_eps));
  TPSERVE_RETURN_IF_ERROR(f.Bool("tie_word_embeddings", &c->tie_word_embeddings));
  TPSERVE_RETURN_IF_ERROR(ParseAttention(f, c));
  TPSERVE_RETURN_IF_ERROR(ParseRope(f, source, c));
  TPSERVE_RETURN_IF_ERROR(ParseDType(f, c));
  return ParseTokenIds(f, c);
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
  absl::StatusOr<json> root = ParseJsonObject(json_text, source, /*reject_duplicate_keys=*/false);
  if (!root.ok()) return root.status();
  ModelConfig config;
  TPSERVE_RETURN_IF_ERROR(ParseFields(*root, source, &config));
  if (absl::Status s = config.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", s.message()));
  }
  return config;
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& path) {
  absl::StatusOr<std::string> text = ReadTextFile(path);
  if (!text.ok()) return text.status();
  return ParseModelConfig(*text, path);
}

absl::StatusOr<std::vector<int>> ParseGenerationEosTokenIds(const std::string& json_text,
                                                            const std::string& source) {
  absl::StatusOr<json> root = ParseJsonObject(json_text, source, /*reject_duplicate_keys=*/false);
  if (!root.ok()) return root.status();
  std::vector<int> ids;
  TPSERVE_RETURN_IF_ERROR(ParseEosTokenIds(Fields(*root, source), &ids));
  return ids;
}

absl::StatusOr<std::vector<int>> LoadGenerationEosTokenIds(const std::string& path) {
  std::error_code error;
  if (!std::filesystem::exists(path, error)) return std::vector<int>{};
  absl::StatusOr<std::string> text = ReadTextFile(path);
  if (!text.ok()) return text.status();
  return ParseGenerationEosTokenIds(*text, path);
}

}  // namespace tpserve
