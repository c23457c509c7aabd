// The CUDA backend of BuildRank (rank_builder.h). Two libraries implement this header:
// :cuda_backend (cuda_backend.cc: the CUDA model and NCCL, linked into
// tpserve_worker_cuda, the forward tool and the CUDA benchmark) and :no_cuda_backend
// (no_cuda_backend.cc: refuses CUDA, linked into the CPU-only tpserve_worker, which then
// loads no CUDA library at all).
#ifndef TPSERVE_WORKER_RANK_CUDA_BACKEND_H_
#define TPSERVE_WORKER_RANK_CUDA_BACKEND_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tpserve/v1/worker.pb.h"
#include "worker/models/model_files.h"
#include "worker/rank/rank_executor.h"

namespace tpserve {

// Whether this binary can run CUDA ranks.
bool HasCudaBackend();

// Checks an assignment to a "cuda:<n>" device (its ordinal already checked, CudaOrdinal)
// beyond what every assignment is checked for: dtype, quantization, comm_backend and the
// KV cache's dtype. FAILED_PRECONDITION
// without the CUDA backend.
absl::Status ValidateCudaAssignment(const worker::v1::Assignment& a);

// Builds a validated CUDA assignment's rank: NCCL through the frontend's store, this
// rank's shards uploaded to its GPU, the KV cache sized from the GPU's free memory.
// FAILED_PRECONDITION without the CUDA backend.
absl::StatusOr<std::unique_ptr<RankExecutor>> BuildCudaRank(const worker::v1::Assignment& a,
                                                            const ModelFiles& files);

}  // namespace tpserve

#endif  // TPSERVE_WORKER_RANK_CUDA_BACKEND_H_
