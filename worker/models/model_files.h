// A checkpoint directory opened for one rank: OpenModel reads DIR/config.json and opens
// the checkpoint (validating every header) and checks that `tp` ranks can split the
// model; LoadModel builds this rank's shards of a LlamaModel and loads them.
//
// Shared by the rank builder (serving), the forward tool, the benchmarks and the golden
// tests. Errors name the file and the rule it broke. Any thread; no shared state.
#ifndef TPSERVE_WORKER_MODELS_MODEL_FILES_H_
#define TPSERVE_WORKER_MODELS_MODEL_FILES_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/comm/comm_group.h"
#include "worker/loader/checkpoint.h"
#include "worker/loader/hf_config.h"
#include "worker/models/llama.h"

namespace tpserve {

struct ModelFiles {
  ModelConfig config;
  std::unique_ptr<Checkpoint> checkpoint;
};
absl::StatusOr<ModelFiles> OpenModel(const std::string& dir, int tp);

// Builds this rank's shards (rank and size from `comm`) and loads them from `files`
// (`weights`: LlamaModel::LoadWeights).
absl::StatusOr<std::unique_ptr<LlamaModel>> LoadModel(const ModelFiles& files, CommGroup* comm,
                                                      CpuWeights weights = CpuWeights::kFloat32);

// Bytes one of `tp` CPU ranks holds for its weights once loaded as `weights`: fp32 all
// at 4 bytes; bf16 the matrices at 2 (plus a tied LM head's packed copy of the embedding
// shard); int8 the linears and LM head at 1 (a tied head's copy too), the embedding
// table at 2. Norms and biases stay fp32.
int64_t CpuWeightBytes(const ModelConfig& config, int tp, CpuWeights weights);

}  // namespace tpserve

#endif  // TPSERVE_WORKER_MODELS_MODEL_FILES_H_
