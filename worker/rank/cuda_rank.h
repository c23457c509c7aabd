// A CUDA rank's model and communicator, for the tools that drive the CUDA model without a
// worker loop (the forward tool, cuda_benchmark, cuda_golden_test). Implemented in
// cuda_backend.cc (library :cuda_backend).
#ifndef TPSERVE_WORKER_RANK_CUDA_RANK_H_
#define TPSERVE_WORKER_RANK_CUDA_RANK_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/comm/nccl_comm_group.h"
#include "worker/models/cuda/llama_cuda.h"
#include "worker/models/model_files.h"

namespace tpserve {

struct CudaRank {
  std::unique_ptr<NcclCommGroup> comm;  // outlives model, which holds a pointer to it
  std::unique_ptr<CudaModelRunner> model;  // no KV cache yet: AllocateCache sizes it
};

absl::StatusOr<CudaRank> LoadCudaRank(const ModelFiles& files, const NcclOptions& comm_options,
                                      const CudaModelOptions& model_options);

// "float32" or "bfloat16" (also "fp32", "bf16"); the name a flag or an assignment gives.
absl::StatusOr<DeviceDType> ParseDeviceDType(const std::string& name);

}  // namespace tpserve

#endif  // TPSERVE_WORKER_RANK_CUDA_RANK_H_
