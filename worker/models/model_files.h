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

}  // namespace tpserve

#endif  // TPSERVE_WORKER_MODELS_MODEL_FILES_H_
