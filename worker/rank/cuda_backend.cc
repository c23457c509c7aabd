#include "worker/rank/cuda_backend.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "spdlog/spdlog.h"
#include "worker/models/llama_tensors.h"
#include "worker/rank/cuda_rank.h"
#include "worker/rank/rank_common.h"

namespace tpserve {

using worker::v1::Assignment;

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

bool HasCudaBackend() { return true; }

absl::Status ValidateCudaAssignment(const Assignment& a) {
  if (!a.quantization().empty()) {
    return absl::UnimplementedError(absl::StrCat(
        "assignment: quantization \"", a.quantization(), "\": the CUDA backend has none"));
  }
  if (absl::Status s = ParseDeviceDType(a.dtype().empty() ? "bfloat16" : a.dtype()).status();
      !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("assignment: ", s.message()));
  }
  if (a.comm_backend() != "nccl") {
    return absl::InvalidArgumentError(absl::StrCat(
        "assignment: comm_backend \"", a.comm_backend(), "\": CUDA ranks use nccl"));
  }
  const std::string compute = a.dtype().empty() ? "bfloat16" : a.dtype();
  if (!a.kv_cache().dtype().empty() && a.kv_cache().dtype() != compute) {
    return absl::UnimplementedError(absl::StrCat("assignment: kv_cache.dtype \"",
                                                 a.kv_cache().dtype(),
                                                 "\": the CUDA cache holds the compute dtype (",
                                                 compute, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<RankExecutor>> BuildCudaRank(const Assignment& a,
                                                            const ModelFiles& files) {
  NcclOptions nccl;
  nccl.rank = a.rank();
  nccl.size = a.world_size();
  nccl.device = *CudaOrdinal(a.device());  // validated
  nccl.store_host = a.store_host();
  nccl.store_port = a.store_port();
  nccl.prefix = absl::StrCat(a.store_key_prefix(), "/");
  nccl.timeout = CommTimeout(a);
  nccl.connect_timeout = std::max(nccl.timeout, absl::Minutes(5));
  CudaModelOptions model;
  model.dtype = *ParseDeviceDType(a.dtype().empty() ? "bfloat16" : a.dtype());
  model.limits = a.limits();  // the buffers are sized for them
  model.step_timeout = nccl.timeout;
  model.cuda_graphs = !a.eager_decode();
  TPSERVE_RETURN_IF_ERROR(CheckHostWeightsFit(files.config, a.world_size(), CpuWeights::kFloat32));
  TPSERVE_ASSIGN_OR_RETURN(CudaRank rank, LoadCudaRank(files, nccl, model));
  spdlog::info("decode steps {}",
               model.cuda_graphs ? "replay CUDA graphs" : "run eagerly (--enforce-eager)");
  // Sized after the weights and activations took their share of the device.
  const double fraction = a.kv_cache().memory_fraction() > 0 ? a.kv_cache().memory_fraction() : 0.9;
  return MakeRank(a, ExecutorOptions(a), std::move(rank.comm), std::move(rank.model),
                  [fraction] { return CudaKvBudgetBytes(fraction); });
}

}  // namespace tpserve
