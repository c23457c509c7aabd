// The one way to build a rank. BuildRank turns an Assignment into a RankExecutor the same
// way for both backends: validate the assignment, open the model files, make the
// communicator (Gloo or NCCL, rendezvous through the frontend's store), load this rank's
// shards into the backend's ModelRunner (CpuModelRunner, or the CUDA model built from
// the host layers' shards by LoadCudaRank), size the KV cache from the one budget rule
// (the assignment's blocks, or its bytes, or its fraction of the backend's free memory),
// and hand runner and communicator to RankExecutor::Create.
//
// Called by the worker loop once per assignment. Call on the thread that will run the
// rank: for CUDA it becomes the thread whose current device is the rank's.
//
// Two libraries build this file: :rank_builder, whose CUDA backend is real
// (cuda_backend.h; tpserve_worker_cuda), and :rank_builder_cpu, which refuses CUDA
// assignments and links no CUDA library (tpserve_worker).
#ifndef TPSERVE_WORKER_RANK_RANK_BUILDER_H_
#define TPSERVE_WORKER_RANK_RANK_BUILDER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "tpserve/v1/worker.pb.h"
#include "worker/rank/rank_executor.h"

namespace tpserve {

// Builds this rank from an Assignment: validates it, joins the Gloo group through the
// frontend's store, loads the shards and sizes the KV cache.
absl::StatusOr<std::unique_ptr<RankExecutor>> BuildRank(const worker::v1::Assignment& a);

// The assignment as a worker started with --device `device` runs it (see
// WorkerLoopOptions::device); FAILED_PRECONDITION for the other kind of device.
absl::StatusOr<worker::v1::Assignment> ForThisDevice(const worker::v1::Assignment& a,
                                                     const std::string& device);

}  // namespace tpserve

#endif  // TPSERVE_WORKER_RANK_RANK_BUILDER_H_
