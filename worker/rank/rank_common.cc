#include "worker/rank/rank_common.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "worker/kv_cache.h"
#include "worker/models/llama_tensors.h"
#include "worker/models/model_files.h"

namespace tpserve {

using worker::v1::Assignment;

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
namespace {

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

}  // namespace

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

}  // namespace tpserve
