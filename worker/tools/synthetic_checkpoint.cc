#include "worker/tools/synthetic_checkpoint.h"

#include <sys/stat.h>

#include <fstream>
#include <map>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"
#include "worker/loader/safetensors_writer.h"

namespace tpserve {
namespace {

struct Spec {
  std::string name;
  Shape shape;
  bool norm;  // RMSNorm weights are centred on 1
};

std::vector<Spec> TensorSpecs(const SyntheticLlama& s) {
  const int64_t h = s.hidden_size, d = h / s.num_heads, i = s.intermediate_size;
  std::vector<Spec> specs = {{"model.embed_tokens.weight", {s.vocab_size, h}, false}};
  for (int l = 0; l < s.num_layers; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    specs.push_back({p + "input_layernorm.weight", {h}, true});
    specs.push_back({p + "self_attn.q_proj.weight", {s.num_heads * d, h}, false});
    specs.push_back({p + "self_attn.k_proj.weight", {s.num_kv_heads * d, h}, false});
    specs.push_back({p + "self_attn.v_proj.weight", {s.num_kv_heads * d, h}, false});
    specs.push_back({p + "self_attn.o_proj.weight", {h, s.num_heads * d}, false});
    specs.push_back({p + "post_attention_layernorm.weight", {h}, true});
    specs.push_back({p + "mlp.gate_proj.weight", {i, h}, false});
    specs.push_back({p + "mlp.up_proj.weight", {i, h}, false});
    specs.push_back({p + "mlp.down_proj.weight", {h, i}, false});
  }
  specs.push_back({"model.norm.weight", {h}, true});
  if (!s.tie_word_embeddings) specs.push_back({"lm_head.weight", {s.vocab_size, h}, false});
  return specs;
}

absl::Status WriteConfig(const std::string& dir, const SyntheticLlama& s) {
  nlohmann::json config = {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"hidden_size", s.hidden_size},
      {"intermediate_size", s.intermediate_size},
      {"num_hidden_layers", s.num_layers},
      {"num_attention_heads", s.num_heads},
      {"num_key_value_heads", s.num_kv_heads},
      {"vocab_size", s.vocab_size},
      {"max_position_embeddings", s.max_position_embeddings},
      {"rms_norm_eps", 1e-5},
      {"rope_theta", 10000.0},
      {"tie_word_embeddings", s.tie_word_embeddings},
      {"torch_dtype", s.dtype == DType::kBF16 ? "bfloat16" : "float32"},
      {"bos_token_id", 1},
      {"eos_token_id", 2},
  };
  std::ofstream out(dir + "/config.json");
  out << config.dump(2) << "\n";
  if (!out) return absl::DataLossError(absl::StrCat(dir, "/config.json: write failed"));
  return absl::OkStatus();
}

}  // namespace

int64_t SyntheticLlama::NumParameters() const {
  int64_t n = 0;
  for (const Spec& s : TensorSpecs(*this)) n += NumElements(s.shape);
  return n;
}

absl::Status WriteSyntheticLlama(const std::string& dir, const SyntheticLlama& s) {
  if (s.hidden_size % s.num_heads != 0 || s.num_heads % s.num_kv_heads != 0 || s.num_shards < 1) {
    return absl::InvalidArgumentError("synthetic Llama: inconsistent head counts or shards");
  }
  mkdir(dir.c_str(), 0755);
  TPSERVE_RETURN_IF_ERROR(WriteConfig(dir, s));
  std::mt19937 rng(s.seed);
  std::normal_distribution<float> dist(0.0f, 0.02f);
  const std::vector<Spec> specs = TensorSpecs(s);
  std::vector<std::vector<SafetensorsTensor>> shards(s.num_shards);
  std::map<std::string, std::string> weight_map;
  for (size_t k = 0; k < specs.size(); ++k) {
    std::vector<float> values(NumElements(specs[k].shape));
    for (float& v : values) v = (specs[k].norm ? 1.0f : 0.0f) + dist(rng);
    const size_t shard = k * s.num_shards / specs.size();
    shards[shard].push_back({specs[k].name, s.dtype, specs[k].shape,
                             s.dtype == DType::kBF16 ? Bf16Bytes(values) : F32Bytes(values)});
  }
  if (s.num_shards == 1) return WriteSafetensors(dir + "/model.safetensors", shards[0]);
  for (int i = 0; i < s.num_shards; ++i) {
    const std::string file =
        absl::StrFormat("model-%05d-of-%05d.safetensors", i + 1, s.num_shards);
    TPSERVE_RETURN_IF_ERROR(WriteSafetensors(dir + "/" + file, shards[i]));
    for (const SafetensorsTensor& t : shards[i]) weight_map[t.name] = file;
  }
  return WriteSafetensorsIndex(dir + "/model.safetensors.index.json", weight_map);
}

}  // namespace tpserve
