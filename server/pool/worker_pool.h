// WorkerPool: the frontend's side of the control plane (proto/tpserve/v1/worker.proto).
//
// Start() serves WorkerControl on `control_address`, owns the rendezvous StoreServer,
// spawns `tp` local `tpserve_worker` processes (or waits for that many external ones to
// attach), assigns ranks, relays rendezvous, and returns once every rank is Ready.
// Only processes that prove the pool's worker token (worker_token.h) get an Assignment
// or reach the store; others are refused and do not affect the pool.
// RunStep() writes the same StepPlan to every rank and waits for all answers within the
// step deadline. Any rank failing, dying or missing the deadline fails the pool:
// Shutdown goes to the rest, spawned processes are terminated and reaped, and every
// later RunStep returns UNAVAILABLE. The pool is then replaced (a new Start with a new
// generation) or the frontend exits.
//
// Start() fails with the first rank's own error (a bad model dir: the worker's
// NOT_FOUND naming the file), UNAVAILABLE if a worker process exits or drops its
// stream first, DEADLINE_EXCEEDED after start_timeout (naming refused connections, if
// any); everything it started is torn down by then. RunStep() with a step number that
// does not follow the last one is INVALID_ARGUMENT and sends nothing (the pool stays
// healthy). A failed step returns as soon as the failure is known (a missed deadline:
// at step_timeout plus step_timeout_per_token for each token the step computes); the
// supervisor tears the ranks down meanwhile, and Shutdown() or
// the destructor waits for that.
//
// Threading: RunStep from one thread (the engine's); the rest from any. A supervisor
// thread watches the ranks and tears the pool down as soon as one fails, even while no
// step is running.
#ifndef TPSERVE_SERVER_POOL_WORKER_POOL_H_
#define TPSERVE_SERVER_POOL_WORKER_POOL_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/pool/step_executor.h"
#include "tpserve/v1/batch_limits.h"

namespace tpserve {

struct WorkerPoolOptions {
  std::string model_dir;
  int tp = 1;
  std::string device = "cpu";      // "cpu" (Gloo) or "cuda" (NCCL; rank r on GPU r)
  std::string dtype = "float32";   // compute dtype; cuda also takes "bfloat16"
  bool eager_decode = false;       // cuda: decode steps without CUDA graphs
  bool spawn_workers = true;       // false: wait for tp external workers to attach
  std::string worker_binary;       // path of tpserve_worker when spawning
  std::string worker_log_level = "info";  // spawned workers' --log-level
  int worker_threads = 1;                 // spawned workers' --threads: compute threads each
  // Where workers dial in: "unix:/path/sock" for local workers, "host:port" for remote.
  std::string control_address;
  // External workers: the file holding the worker token that they read too (tpserve_worker
  // --worker-token-file), read at each Start. Empty: a token no worker holds, so none
  // can join. Spawned ranks always get a fresh random token per generation.
  std::string worker_token_file;
  // The rendezvous store's bind and advertised host; empty: as StoreAddressFor
  // (control_address.h) derives it, loopback unless ranks dial in over another
  // interface.
  std::string store_host;
  // The host Assignments name for the store when it is not the one the ranks can reach
  // it at by the rules above (a frontend behind NAT, or known to the ranks by a DNS
  // name): tpserve --advertise-address. Empty: as store_host. Needs a HOST:PORT
  // control_address.
  std::string advertise_host;
  int generation = 0;                    // namespaces rendezvous keys per pool
  int kv_block_size = 16;
  int kv_num_blocks = 0;                 // 0: size from kv_memory_bytes
  std::string kv_cache_dtype;            // "float32" or "bfloat16"; empty: dtype
  std::string quantization;              // "" (none) or "int8" (cpu, dtype bfloat16)
  int64_t kv_memory_bytes = int64_t{1} << 30;  // per rank, when kv_num_blocks is 0
  // cuda, when kv_num_blocks and kv_memory_bytes are 0: the share of each GPU that its
  // rank may fill (weights and activations included) before the KV cache is sized.
  double kv_memory_fraction = 0;
  // The limits every plan respects, sent in the Assignment (max_context 0: the model's).
  BatchLimits limits = DefaultBatchLimits();
  absl::Duration start_timeout = absl::Minutes(5);  // attach + load + Ready
  absl::Duration step_timeout = absl::Seconds(30);  // one step, all ranks
  // Added to a step's deadline per token the ranks compute in it (num_new_tokens of its
  // sequences), so that a long prefill on a slow machine (a 2,048-token chunk took 80 s
  // on one core) is waited for while a hung rank on a small step is still caught at
  // step_timeout. 100 ms is ten tokens a second, below any healthy rank's rate.
  absl::Duration step_timeout_per_token = absl::Milliseconds(100);
  // Bounds each collective inside a step; 0: step_timeout.
  absl::Duration comm_timeout = absl::ZeroDuration();
  // After Shutdown is sent, how long spawned workers get before SIGTERM, and again
  // before SIGKILL.
  absl::Duration stop_grace = absl::Seconds(1);
  // Called once, on the pool's supervisor thread, the moment a serving pool is known
  // lost (before its teardown), with the failure; e.g. to turn health NOT_SERVING at
  // once. Not called for Shutdown() or a failed Start().
  std::function<void(const absl::Status&)> on_failure;

  absl::Status Validate() const;
};

class WorkerPool : public StepExecutor {
 public:
  static absl::StatusOr<std::unique_ptr<WorkerPool>> Start(const WorkerPoolOptions& options);
  ~WorkerPool() override;  // Shutdown()

  absl::StatusOr<worker::v1::StepResult> RunStep(const worker::v1::StepPlan& plan) override;
  int num_kv_blocks() const override;
  int kv_block_size() const override;

  // False once any rank has failed or Shutdown ran.
  bool healthy() const;
  // Why the pool stopped serving (OK while healthy).
  absl::Status failure() const;
  // pids of the spawned worker processes (empty with external workers).
  std::vector<int64_t> worker_pids() const;
  // Sends Shutdown to every rank, terminates spawned processes (SIGTERM, then SIGKILL
  // after a grace period) and reaps them. Idempotent.
  void Shutdown(const std::string& reason);

 private:
  struct Impl;
  explicit WorkerPool(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_POOL_WORKER_POOL_H_
