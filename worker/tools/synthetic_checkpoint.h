// Writes random-weight Llama-architecture checkpoints in Hugging Face layout
// (config.json + model.safetensors or shards + index), for benchmarks and for tests
// that need a valid checkpoint to break. Weights are N(0, 0.02²), norms near 1.
#ifndef TPSERVE_WORKER_TOOLS_SYNTHETIC_CHECKPOINT_H_
#define TPSERVE_WORKER_TOOLS_SYNTHETIC_CHECKPOINT_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "worker/dtype.h"

namespace tpserve {

struct SyntheticLlama {
  int hidden_size = 64;
  int intermediate_size = 128;
  int num_layers = 2;
  int num_heads = 4;
  int num_kv_heads = 2;
  int vocab_size = 256;
  int max_position_embeddings = 2048;
  bool tie_word_embeddings = false;
  DType dtype = DType::kF32;  // F32 or BF16
  int num_shards = 1;         // > 1 writes model-0000i-of-0000n.safetensors + index
  uint32_t seed = 0;

  int64_t NumParameters() const;
};

absl::Status WriteSyntheticLlama(const std::string& dir, const SyntheticLlama& spec);

}  // namespace tpserve

#endif  // TPSERVE_WORKER_TOOLS_SYNTHETIC_CHECKPOINT_H_
