// The tensors a Llama-family checkpoint must hold, worked out from config.json alone, so
// that a checkpoint is checked against its config before any weight or KV memory is
// allocated: every expected tensor present with its full Hugging Face shape and a float
// dtype, and no tensor the model would not read (a bias of an mlp_bias checkpoint served
// without mlp_bias, say), except known harmless buffers. Also what one rank's shards
// take in memory, to refuse a model that cannot fit before loading it.
//
// The bias rules live here and LlamaAttention/LlamaMlp follow them, so the list and the
// loader cannot disagree (tests/golden's manifest test loads every fixture and compares).
// Pure functions; any thread.
#ifndef TPSERVE_WORKER_MODELS_LLAMA_TENSORS_H_
#define TPSERVE_WORKER_MODELS_LLAMA_TENSORS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "worker/loader/checkpoint.h"
#include "worker/loader/hf_config.h"
#include "worker/tensor.h"

namespace tpserve {

// As transformers: Qwen2 always has q/k/v biases, Mistral never, Llama and Qwen3 follow
// attention_bias.
bool HasQkvBias(const ModelConfig& config);
// Qwen2's and Mistral's o_proj never have a bias; Llama and Qwen3 follow attention_bias.
bool HasOProjBias(const ModelConfig& config);

struct ExpectedTensor {
  std::string name;  // e.g. "model.layers.0.self_attn.q_proj.weight"
  Shape shape;       // the full (unsharded) Hugging Face shape
};

// Every tensor LlamaModel::LoadWeights reads for `config`, in load order.
std::vector<ExpectedTensor> LlamaCheckpointTensors(const ModelConfig& config);

// Whether a checkpoint tensor the model does not read may be left unread: buffers
// transformers saves for some checkpoints that recomputes (rotary inv_freq).
bool IsIgnorableTensor(const std::string& name);

// Every expected tensor is in `checkpoint` with its shape and a float dtype (F32, BF16,
// F16), and every tensor of `checkpoint` is expected or ignorable. Reads only the
// headers. INVALID_ARGUMENT naming `dir`, the tensor and the rule; lists up to a few
// names when many are missing or unexpected.
absl::Status CheckCheckpointTensors(const ModelConfig& config, const Checkpoint& checkpoint,
                                    const std::string& dir);

// Bytes one of `tp` ranks holds for its weight shards at `bytes_per_value` (4: the
// host's fp32 copy; 2: bf16 on a GPU): sharded matrices split by tp (kv heads replicated
// when tp exceeds them, the vocabulary padded to a multiple of tp), norms replicated.
int64_t RankWeightBytes(const ModelConfig& config, int tp, int bytes_per_value);

// The same count by kind, for formats that hold the kinds at different widths.
struct RankWeightValues {
  int64_t linear = 0;     // the decoder layers' weight matrices (what int8 quantizes)
  int64_t embedding = 0;  // the embedding table's shard
  int64_t lm_head = 0;    // an untied LM head's shard; 0 when tied
  int64_t other = 0;      // biases and norms
  int64_t layer_linear = 0;  // one decoder layer's weight matrices
  int64_t total() const { return linear + embedding + lm_head + other; }
};
RankWeightValues CountRankWeightValues(const ModelConfig& config, int tp);

}  // namespace tpserve

#endif  // TPSERVE_WORKER_MODELS_LLAMA_TENSORS_H_
