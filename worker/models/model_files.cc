#include "worker/models/model_files.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "worker/models/llama_tensors.h"
#include "worker/tensor.h"

namespace tpserve {

absl::StatusOr<ModelFiles> OpenModel(const std::string& dir, int tp) {
  ModelFiles files;
  TPSERVE_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(dir + "/config.json"));
  if (absl::Status s = config.ValidateTp(tp); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(dir, "/config.json: ", s.message()));
  }
  files.config = std::move(config);
  TPSERVE_ASSIGN_OR_RETURN(files.checkpoint, Checkpoint::Open(dir));
  // Headers only: nothing is allocated for a checkpoint that does not match its config.
  TPSERVE_RETURN_IF_ERROR(CheckCheckpointTensors(files.config, *files.checkpoint, dir));
  return files;
}

absl::StatusOr<std::unique_ptr<LlamaModel>> LoadModel(const ModelFiles& files, CommGroup* comm,
                                                      CpuWeights weights) {
  TPSERVE_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> model,
                           LlamaModel::Create(files.config, comm));
  TPSERVE_RETURN_IF_ERROR(model->LoadWeights(*files.checkpoint, weights));
  TrimTensorStorage();  // the staging buffers' blocks: not what a forward pass asks for
  return model;
}

int64_t CpuWeightBytes(const ModelConfig& config, int tp, CpuWeights weights) {
  const RankWeightValues v = CountRankWeightValues(config, tp);
  const int64_t tied_head = config.tie_word_embeddings ? v.embedding : 0;  // its own copy
  switch (weights) {
    case CpuWeights::kFloat32:
      return v.total() * 4;
    case CpuWeights::kBFloat16:
      return (v.linear + v.embedding + v.lm_head + tied_head) * 2 + v.other * 4;
    case CpuWeights::kInt8:
      return v.linear + v.lm_head + tied_head + v.embedding * 2 + v.other * 4;
  }
  return 0;
}

}  // namespace tpserve
