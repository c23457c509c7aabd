#include "worker/rank/rank_builder.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "spdlog/spdlog.h"
#include "tpserve/v1/batch_limits.h"
#include "worker/comm/gloo_comm_group.h"
#include "worker/kv_cache.h"
#include "worker/models/llama_tensors.h"

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

namespace {

// A CPU rank's share of memory_fraction of the host's available memory (0: none asked).
int64_t CpuFractionBudget(const worker::v1::KvCacheSpec& kv, int world_size) {
  if (kv.memory_fraction() <= 0 || kv.memory_fraction() > 1) return 0;
  // CPU ranks of one host share its memory.
  const double available = static_cast<double>(AvailableHostBytes());
  return static_cast<int64_t>(available * kv.memory_fraction() / std::max(world_size, 1));
}

// The ordinal of "cuda:<n>" ("cuda" alone is device 0), or INVALID_ARGUMENT.
absl::StatusOr<int> CudaOrdinal(const std::string& device) {
  if (device == "cuda") return 0;
  if (!absl::StartsWith(device, "cuda:")) {
    return absl::UnimplementedError(absl::StrCat(
        "assignment: device \"", device, "\": this worker runs on \"cpu\" or \"cuda:<ordinal>\""));
  }
  int ordinal = -1;
  if (!absl::SimpleAtoi(device.substr(5), &ordinal) || ordinal < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "assignment: device \"", device, "\": expected \"cpu\" or \"cuda:<ordinal>\""));
  }
  return ordinal;
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

RankExecutorOptions ExecutorOptions(const Assignment& a) {
  RankExecutorOptions options;
  options.block_size = a.kv_cache().block_size();
  options.num_blocks = a.kv_cache().num_blocks();
  options.limits = a.limits();
  return options;
}

// The one KV budget of a rank: the assignment's block count, or as many blocks of this
// model's geometry as fit in memory_bytes, or else in what `fraction_budget` gives (the
// backend's share of its free memory by memory_fraction; called only then).
absl::StatusOr<int> KvCacheBlocks(const worker::v1::KvCacheSpec& kv, const ModelRunner& model,
                                  absl::FunctionRef<absl::StatusOr<int64_t>()> fraction_budget) {
  if (kv.num_blocks() > 0) return kv.num_blocks();
  int64_t budget = kv.memory_bytes();
  if (budget <= 0) {
    TPSERVE_ASSIGN_OR_RETURN(budget, fraction_budget());
  }
  if (budget <= 0) {
    return absl::InvalidArgumentError("kv cache: set num_blocks or a positive memory budget");
  }
  const int64_t per_block = std::max<int64_t>(model.CacheShape(1, kv.block_size()).bytes(), 1);
  const int64_t blocks = std::min<int64_t>(budget / per_block, std::numeric_limits<int32_t>::max());
  if (blocks < 1) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "kv cache: a budget of ", budget, " bytes holds no block of ", per_block, " bytes"));
  }
  return static_cast<int>(blocks);
}

// A rank of either backend from its communicator and its loaded model.
absl::StatusOr<std::unique_ptr<RankExecutor>> MakeRank(
    const Assignment& a, RankExecutorOptions options, std::unique_ptr<CommGroup> comm,
    std::unique_ptr<ModelRunner> model,
    absl::FunctionRef<absl::StatusOr<int64_t>()> fraction_budget) {
  TPSERVE_ASSIGN_OR_RETURN(options.num_blocks, KvCacheBlocks(a.kv_cache(), *model, fraction_budget));
  return RankExecutor::Create(std::move(comm), std::move(model), options);
}

// Whether this rank's host copy of its shards fits, before any of it is allocated: the
// ranks of a host (world_size of them, as CpuFractionBudget assumes) share its memory.
// In fp32 that is the whole copy (on CUDA, the staging of the upload, and the device
// check follows in CreateCudaLlamaModel). With bf16 weights no fp32 copy exists at any
// time: the bf16 shards, plus, for tied embeddings, the LM head's packed copy of the
// embedding's shard — so a 7B bf16 checkpoint needs its bf16 size, not twice it. With
// int8: the linears and the LM head at one byte, the embedding table at two, and one
// decoder layer's linears staged in bf16 while that layer loads. Norms and biases are
// fp32 throughout.
absl::Status CheckHostWeightsFit(const ModelConfig& config, int world_size, CpuWeights weights) {
  int64_t per_rank = CpuWeightBytes(config, world_size, weights);
  if (weights == CpuWeights::kInt8) {
    per_rank += CountRankWeightValues(config, world_size).layer_linear * 2;  // bf16 staging
  }
  const char* format = weights == CpuWeights::kInt8       ? "int8"
                       : weights == CpuWeights::kBFloat16 ? "bf16"
                                                          : "fp32";
  const int64_t need = per_rank * world_size;
  const int64_t available = AvailableHostBytes();
  if (need <= available) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "the weights take ", per_rank, " bytes per rank in ", format, " (", need,
      " bytes for the ", world_size, " rank(s) of this host), more than the host's available "
      "memory (", available, " bytes, MemAvailable)"));
}

absl::Duration CommTimeout(const Assignment& a) {
  return a.comm_timeout_ms() > 0 ? absl::Milliseconds(a.comm_timeout_ms()) : absl::Seconds(60);
}

absl::StatusOr<std::unique_ptr<RankExecutor>> BuildCpuRank(const Assignment& a,
                                                           const ModelFiles& files) {
  GlooOptions gloo;
  gloo.rank = a.rank();
  gloo.size = a.world_size();
  gloo.store_host = a.store_host();
  gloo.store_port = a.store_port();
  gloo.prefix = a.store_key_prefix();
  gloo.timeout = CommTimeout(a);
  // Peers attach and open their files at different times; the frontend's start timeout
  // bounds the whole start anyway.
  gloo.connect_timeout = std::max(gloo.timeout, absl::Minutes(5));
  const CpuWeights weights = a.quantization() == "int8" ? CpuWeights::kInt8
                             : a.dtype() == "bfloat16"  ? CpuWeights::kBFloat16
                                                        : CpuWeights::kFloat32;
  TPSERVE_RETURN_IF_ERROR(CheckHostWeightsFit(files.config, a.world_size(), weights));
  TPSERVE_ASSIGN_OR_RETURN(std::unique_ptr<GlooCommGroup> comm, GlooCommGroup::Create(gloo));
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
