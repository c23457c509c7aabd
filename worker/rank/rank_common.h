// The parts of building a rank that both backends share (rank_builder.cc for the CPU,
// cuda_backend.cc for CUDA): the executor's options, the one KV budget rule, the host
// memory check before loading, the collectives' timeout and a device's CUDA ordinal.
#ifndef TPSERVE_WORKER_RANK_RANK_COMMON_H_
#define TPSERVE_WORKER_RANK_RANK_COMMON_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tpserve/v1/worker.pb.h"
#include "worker/comm/comm_group.h"
#include "worker/models/llama.h"
#include "worker/models/model_runner.h"
#include "worker/rank/rank_executor.h"

namespace tpserve {

// The ordinal of "cuda:<n>" ("cuda" alone is device 0); UNIMPLEMENTED for a device that
// is neither, INVALID_ARGUMENT for a bad ordinal.
absl::StatusOr<int> CudaOrdinal(const std::string& device);

RankExecutorOptions ExecutorOptions(const worker::v1::Assignment& a);

// A rank of either backend from its communicator and its loaded model: the KV cache is
// the assignment's block count, or as many blocks of this model's geometry as fit in
// its memory_bytes, or else in what `fraction_budget` gives (the backend's share of its
// free memory by memory_fraction; called only then).
absl::StatusOr<std::unique_ptr<RankExecutor>> MakeRank(
    const worker::v1::Assignment& a, RankExecutorOptions options, std::unique_ptr<CommGroup> comm,
    std::unique_ptr<ModelRunner> model,
    absl::FunctionRef<absl::StatusOr<int64_t>()> fraction_budget);

// Whether this rank's host copy of its shards fits, before any of it is allocated
// (RESOURCE_EXHAUSTED naming the bytes otherwise).
absl::Status CheckHostWeightsFit(const ModelConfig& config, int world_size, CpuWeights weights);

// The assignment's collectives timeout (60 s when unset).
absl::Duration CommTimeout(const worker::v1::Assignment& a);

}  // namespace tpserve

#endif  // TPSERVE_WORKER_RANK_RANK_COMMON_H_
