// The worker's control loop: one rank's life in a pool, following the stream rules of
// proto/tpserve/v1/worker.proto.
//
//   Hello → Challenge → Proof (of the worker token) → Assignment → join the Gloo group,
//   load shards, allocate the KV cache → Ready → (StepPlan → StepResult)* → Shutdown
//
// A frontend that refuses the proof ends the stream: UNAUTHENTICATED, returned. Any
// later failure (a bad assignment, a load error, a rejected plan, a failed collective,
// a message out of order) is sent to the frontend as Error{code, message, step} and
// returned. Once assigned, if the stream ends without a Shutdown the process exits at
// once with kExitFrontendLost, even in the middle of a step. Called from main(), once;
// it makes the token this process's store credential (SetProcessWorkerToken).
#ifndef TPSERVE_WORKER_RANK_WORKER_LOOP_H_
#define TPSERVE_WORKER_RANK_WORKER_LOOP_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tpserve/v1/worker.pb.h"

namespace tpserve {

// Exit status when the frontend's stream ends without a Shutdown.
inline constexpr int kExitFrontendLost = 3;

struct WorkerLoopOptions {
  std::string frontend;  // "unix:/path" or "host:port"
  absl::Duration connect_timeout = absl::Seconds(30);
  // The pool's worker token (tpserve_worker --worker-token-fd / --worker-token-file).
  std::string token;
  // The device this worker was started for: "" (whatever the assignment names), "cpu",
  // "cuda" (the assigned ordinal) or "cuda:<n>" (GPU n of this host, whatever ordinal
  // the assignment names: a host of a multi-host pool numbers its own GPUs from 0). An
  // assignment for the other kind of device is refused.
  std::string device;
  // The rank to ask for (Hello.requested_rank); unset: whichever the frontend gives.
  std::optional<int> rank;
};

// OK after a Shutdown; otherwise the error (already reported to the frontend when the
// stream was up).
absl::Status RunWorkerLoop(const WorkerLoopOptions& options);

}  // namespace tpserve

#endif  // TPSERVE_WORKER_RANK_WORKER_LOOP_H_
