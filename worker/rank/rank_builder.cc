#include "worker/rank/rank_builder.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "spdlog/spdlog.h"
#include "tpserve/v1/batch_limits.h"
#include "worker/comm/gloo_comm_group.h"
#include "worker/kv_cache.h"
#include "worker/models/llama_tensors.h"
#include "worker/rank/cuda_backend.h"
#include "worker/rank/rank_common.h"

namespace tpserve {

using worker::v1::Assignment;

namespace {

// A CPU rank's share of memory_fraction of the host's available memory (0: none asked).
int64_t CpuFractionBudget(const worker::v1::KvCacheSpec& kv, int world_size) {
  if (kv.memory_fraction() <= 0 || kv.memory_fraction() > 1) return 0;
  // CPU ranks of one host share its memory.
  const double available = static_cast<double>(AvailableHostBytes());
  return static_cast<int64_t>(available * kv.memory_fraction() / std::max(world_size, 1));
}

absl::Status ValidateAssignment(const Assignment& a) {
  if (a.world_size() < 1 || a.rank() < 0 || a.rank() >= a.world_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("assignment: rank ", a.rank(), " outside world_size ", a.world_size()));
  }
  if (!a.quantization().empty() && a.quantization() != "int8") {
    return absl::InvalidArgumentError(absl::StrCat(
        "assignment: quantization \"", a.quantization(), "\": expected empty or int8"));
  }
  if (a.device() != "cpu") {
    TPSERVE_RETURN_IF_ERROR(CudaOrdinal(a.device()).status());
    return ValidateCudaAssignment(a);
  }
  const std::string& kv_dtype = a.kv_cache().dtype();
  if (!kv_dtype.empty() && kv_dtype != "float32" && kv_dtype != "bfloat16") {
    return absl::InvalidArgumentError(absl::StrCat(
        "assignment: kv_cache.dtype \"", kv_dtype, "\": expected float32 or bfloat16"));
  }
  if (!a.dtype().empty() && a.dtype() != "float32" && a.dtype() != "bfloat16") {
    return absl::UnimplementedError(absl::StrCat(
        "assignment: dtype \"", a.dtype(),
        "\": the CPU backend computes in float32, or with bfloat16 weights"));
  }
  if (a.quantization() == "int8" && a.dtype() != "bfloat16") {
    return absl::InvalidArgumentError(absl::StrCat(
        "assignment: quantization int8 needs dtype \"bfloat16\" (the embedding table's), not \"",
        a.dtype(), "\""));
  }
  if (a.world_size() > 1 && a.comm_backend() != "gloo") {
    return absl::UnimplementedError(absl::StrCat("assignment: comm_backend \"", a.comm_backend(),
                                                 "\": the CPU backend uses gloo"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<RankExecutor>> BuildCpuRank(const Assignment& a,
                                                           const ModelFiles& files) {
  GlooOptions gloo;
  gloo.rank = a.rank();
  gloo.size = a.world_size();
  gloo.store_host = a.store_host();
  gloo.store_port = a.store_port();
  gloo.prefix = a.store_key_prefix();
  // Bound where this host routes to the store from (ranks on other hosts reach it the
  // same way), or on the interface GLOO_SOCKET_IFNAME names.
  if (const char* iface = std::getenv("GLOO_SOCKET_IFNAME"); iface != nullptr && *iface) {
    gloo.bind_interface = iface;
  }
  gloo.timeout = CommTimeout(a);
  // Peers attach and open their files at different times; the frontend's start timeout
  // bounds the whole start anyway.
  gloo.connect_timeout = std::max(gloo.timeout, absl::Minutes(5));
  const CpuWeights weights = a.quantization() == "int8" ? CpuWeights::kInt8
                             : a.dtype() == "bfloat16"  ? CpuWeights::kBFloat16
                                                        : CpuWeights::kFloat32;
  TPSERVE_RETURN_IF_ERROR(CheckHostWeightsFit(files.config, a.world_size(), weights));
  TPSERVE_ASSIGN_OR_RETURN(std::unique_ptr<GlooCommGroup> comm, GlooCommGroup::Create(gloo));
  if (a.world_size() > 1) spdlog::info("collectives: {}", comm->TransportText());
  TPSERVE_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> model,
                           LoadModel(files, comm.get(), weights));
  // The cache follows the compute dtype unless the assignment says otherwise.
  const std::string& kv_dtype = a.kv_cache().dtype().empty() ? a.dtype() : a.kv_cache().dtype();
  auto runner = std::make_unique<CpuModelRunner>(std::move(model), kv_dtype == "bfloat16" ? 2 : 4);
  return MakeRank(a, ExecutorOptions(a), std::move(comm), std::move(runner),
                  [&a]() -> absl::StatusOr<int64_t> {
                    return CpuFractionBudget(a.kv_cache(), a.world_size());
                  });
}

}  // namespace

absl::StatusOr<Assignment> ForThisDevice(const Assignment& a, const std::string& device) {
  if (device.empty() || device == a.device()) return a;
  const bool cuda_worker = absl::StartsWith(device, "cuda");
  const bool cuda_assignment = absl::StartsWith(a.device(), "cuda");
  if (cuda_worker != cuda_assignment) {
    return absl::FailedPreconditionError(absl::StrCat(
        "assignment: device \"", a.device(), "\", but this worker was started with --device ",
        device));
  }
  Assignment mine = a;
  if (device != "cuda") mine.set_device(device);  // "cuda:<n>": this host's GPU n
  return mine;
}

absl::StatusOr<std::unique_ptr<RankExecutor>> BuildRank(const Assignment& a) {
  TPSERVE_RETURN_IF_ERROR(ValidateAssignment(a));
  TPSERVE_RETURN_IF_ERROR(ValidateBatchLimits(a.limits(), "assignment: limits"));
  TPSERVE_ASSIGN_OR_RETURN(ModelFiles files, OpenModel(a.model_dir(), a.world_size()));
  // Positions past the model's table would be refused mid-step, after the plan was
  // taken, and cost the whole pool: refuse the assignment instead.
  TPSERVE_RETURN_IF_ERROR(
      ResolveMaxContext(a.limits(), files.config.max_position_embeddings, "assignment: limits")
          .status());
  return a.device() == "cpu" ? BuildCpuRank(a, files) : BuildCudaRank(a, files);
}

}  // namespace tpserve
