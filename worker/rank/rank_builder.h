// LoadCudaRank: one GPU rank, ready to run steps — its NCCL group (rendezvous through the
// coordinator's store), and this rank's shards loaded by the host layers and copied to
// the device. Shared by tpserve_worker, the forward tool and the benchmark.
//
// Call on the thread that will run the rank; it becomes the thread whose current device
// is options.device.
#ifndef TPSERVE_WORKER_RANK_RANK_BUILDER_H_
#define TPSERVE_WORKER_RANK_RANK_BUILDER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "worker/comm/nccl_comm_group.h"
#include "worker/models/cuda/llama_cuda.h"
#include "worker/models/model_files.h"
#include "worker/models/model_runner.h"

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

#endif  // TPSERVE_WORKER_RANK_RANK_BUILDER_H_
