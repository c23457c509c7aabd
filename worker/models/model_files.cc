#include "worker/models/model_files.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace tpserve {

absl::StatusOr<ModelFiles> OpenModel(const std::string& dir, int tp) {
  ModelFiles files;
  absl::StatusOr<ModelConfig> config = LoadModelConfig(dir + "/config.json");
  if (!config.ok()) return config.status();
  if (absl::Status s = config->ValidateTp(tp); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(dir, "/config.json: ", s.message()));
  }
  files.config = *std::move(config);
  absl::StatusOr<std::unique_ptr<Checkpoint>> ckpt = Checkpoint::Open(dir);
  if (!ckpt.ok()) return ckpt.status();
  files.checkpoint = *std::move(ckpt);
  return files;
}

absl::StatusOr<std::unique_ptr<LlamaModel>> LoadModel(const ModelFiles& files, CommGroup* comm) {
  absl::StatusOr<std::unique_ptr<LlamaModel>> model = LlamaModel::Create(files.config, comm);
  if (!model.ok()) return model.status();
  TPSERVE_RETURN_IF_ERROR((*model)->LoadWeights(*files.checkpoint));
  return model;
}

}  // namespace tpserve
