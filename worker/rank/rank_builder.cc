#include "worker/rank/rank_builder.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace tpserve {

absl::StatusOr<CudaRank> LoadCudaRank(const ModelFiles& files, const NcclOptions& comm_options,
                                      const CudaModelOptions& model_options) {
  TPSERVE_RETURN_IF_ERROR(model_options.Validate());
  CudaRank rank;
  TPSERVE_ASSIGN_OR_RETURN(rank.comm, NcclCommGroup::CreateWithOwnStream(comm_options));
  // The host layers cut this rank's shards; the host copy is dropped once on the device.
  TPSERVE_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> host, LoadModel(files, rank.comm.get()));
  TPSERVE_ASSIGN_OR_RETURN(rank.model, CreateCudaLlamaModel(*host, rank.comm.get(), model_options));
  return rank;
}

absl::StatusOr<DeviceDType> ParseDeviceDType(const std::string& name) {
  if (name == "float32" || name == "fp32") return DeviceDType::kFloat32;
  if (name == "bfloat16" || name == "bf16") return DeviceDType::kBFloat16;
  return absl::InvalidArgumentError(
      absl::StrCat("dtype \"", name, "\": the CUDA backend computes in float32 or bfloat16"));
}

}  // namespace tpserve
