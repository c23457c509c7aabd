// ModelConfig: the parts of a Hugging Face config.json that the Llama-family forward needs.
//
// Supported architectures: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM,
// Qwen3ForCausalLM. Pure data plus validation; safe to copy between threads.
#ifndef TPSERVE_WORKER_LOADER_HF_CONFIG_H_
#define TPSERVE_WORKER_LOADER_HF_CONFIG_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/dtype.h"
#include "worker/kernels/activation.h"

namespace tpserve {

struct RopeScaling {
  enum class Type { kNone, kLinear, kLlama3, kYarn, kLongRope };
  Type type = Type::kNone;
  double factor = 1.0;
  // llama3 only:
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  // llama3 and yarn:
  int original_max_position_embeddings = 8192;
  // yarn only (transformers' _compute_yarn_parameters): the ramp between extrapolated
  // and interpolated frequencies, and the factor cos and sin are scaled by (resolved
  // from attention_factor, or mscale/mscale_all_dim, or factor when the file leaves it out).
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  bool truncate = true;
  // yarn and longrope: cos and sin are scaled by it.
  double attention_factor = 1.0;
  // longrope only: per-frequency divisors ([head_dim / 2] each). A sequence longer than
  // original_max_position_embeddings rotates with long_factor, a shorter one with
  // short_factor (see RotaryEmbedding::UsesLongFactors for what "longer" means per token).
  std::vector<double> long_factor, short_factor;
};

enum class ModelFamily { kLlama, kMistral, kQwen2, kQwen3 };

struct ModelConfig {
  std::string architecture;  // e.g. "Qwen2ForCausalLM"
  ModelFamily family = ModelFamily::kLlama;
  int hidden_size = 0;
  int intermediate_size = 0;
  int vocab_size = 0;
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;  // defaults to num_attention_heads when absent
  int head_dim = 0;             // defaults to hidden_size / num_attention_heads
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v biases (Qwen2 always has them)
  bool mlp_bias = false;        // gate/up/down biases (Llama's mlp_bias)
  Activation hidden_act = Activation::kSilu;
  bool qk_norm = false;         // per-head RMSNorm on q and k (Qwen3)
  int max_position_embeddings = 0;
  int sliding_window = 0;  // 0: full attention
  DType torch_dtype = DType::kF32;
  bool torch_dtype_given = false;  // config.json says "dtype"/"torch_dtype"
  int bos_token_id = -1;  // -1 when absent
  int pad_token_id = -1;  // -1 when absent
  std::vector<int> eos_token_ids;

  // Internal consistency (positive sizes, heads divide, kv heads divide heads, ...).
  absl::Status Validate() const;
  // Whether `tp` ranks can split this model: heads and kv heads (or tp a multiple of
  // the kv heads) and the intermediate size must divide. Names the count that fails.
  absl::Status ValidateTp(int tp) const;
};

// Parses and validates `path` (a config.json). Errors name the file and the key.
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& path);

// The dtype the checkpoint in `model_dir` holds its weights in, for --dtype auto:
// config.json's dtype when it gives one, else the embedding's dtype in the safetensors
// headers (as transformers' dtype="auto" falls back to the weights'). Reads headers only.
absl::StatusOr<DType> CheckpointDType(const ModelConfig& config, const std::string& model_dir);
// Same, from text; `source` names it in errors.
absl::StatusOr<ModelConfig> ParseModelConfig(const std::string& json_text,
                                             const std::string& source);

// What tpserve takes from a generation_config.json: the "eos_token_id" (an integer or a
// list), where Hugging Face's generate takes its end-of-sequence ids from (Llama 3
// Instruct lists <|eot_id|> only there), and "max_new_tokens", the length a generation
// defaults to (0 when not given).
struct GenerationConfig {
  std::vector<int> eos_token_ids;
  int32_t max_new_tokens = 0;
};

// `path`'s generation config; empty when the file or a key is absent. Errors name the
// file and the key: an eos id at or past `vocab_size` (config.json's) is refused, and so is
// a max_new_tokens that is not a positive integer.
absl::StatusOr<GenerationConfig> LoadGenerationConfig(const std::string& path, int vocab_size);
// Same, from text; `source` names it in errors.
absl::StatusOr<GenerationConfig> ParseGenerationConfig(const std::string& json_text,
                                                       const std::string& source, int vocab_size);

}  // namespace tpserve

#endif  // TPSERVE_WORKER_LOADER_HF_CONFIG_H_
