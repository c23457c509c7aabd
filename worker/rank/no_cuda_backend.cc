#include "worker/rank/cuda_backend.h"

namespace tpserve {
namespace {

absl::Status NoCuda(const worker::v1::Assignment& a) {
  return absl::FailedPreconditionError(
      "assignment: device \"" + a.device() +
      "\": this tpserve_worker is built without CUDA; CUDA ranks run tpserve_worker_cuda "
      "(tpserve --worker-binary)");
}

}  // namespace

bool HasCudaBackend() { return false; }

absl::Status ValidateCudaAssignment(const worker::v1::Assignment& a) { return NoCuda(a); }

absl::StatusOr<std::unique_ptr<RankExecutor>> BuildCudaRank(const worker::v1::Assignment& a,
                                                            const ModelFiles&) {
  return NoCuda(a);
}

}  // namespace tpserve
