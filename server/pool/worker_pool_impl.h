// WorkerPool's internals, shared by worker_pool.cc (lifecycle: start, steps,
// supervision, teardown) and worker_pool_listener.cc (what the workers' streams
// deliver). Not part of the pool's API.
#ifndef TPSERVE_SERVER_POOL_WORKER_POOL_IMPL_H_
#define TPSERVE_SERVER_POOL_WORKER_POOL_IMPL_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "rendezvous/store_server.h"
#include "server/pool/worker_connection.h"
#include "server/pool/worker_pool.h"

namespace tpserve {

enum class PoolPhase { kStarting, kServing, kStopping };

struct WorkerPool::Impl : public WorkerListener {
  explicit Impl(const WorkerPoolOptions& o) : options(o) {}
  ~Impl() override { Stop("the pool was destroyed"); }

  absl::Status Begin();
  absl::Status AwaitReady();
  absl::StatusOr<worker::v1::StepResult> RunStep(const worker::v1::StepPlan& plan);
  void Stop(const std::string& reason);

  void OnRefused(const worker::v1::Hello& hello, const std::string& why) override;
  absl::StatusOr<worker::v1::FrontendMessage> OnHello(const std::shared_ptr<WorkerConnection>& conn,
                                          const worker::v1::Hello& hello) override;
  void OnMessage(const WorkerConnection& conn, const worker::v1::WorkerMessage& m) override;
  void OnClosed(const WorkerConnection& conn) override;

  void Fail(const absl::Status& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  worker::v1::FrontendMessage MakeAssignment(int rank) const;
  // The store and the WorkerControl server; the control server's bound port.
  absl::StatusOr<int> StartServers();
  absl::Status SpawnRanks(int bound_port);
  // The sender thread: writes each step's plan to every rank, in rank order.
  void SendPlans();
  // Why the awaited step missed its deadline: which ranks, and how far the plan got.
  std::string LateRanks() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void Supervise();
  void Teardown(const std::vector<pid_t>& running);

  const WorkerPoolOptions options;
  std::string worker_token;  // set in Begin, before anything serves
  std::string store_advertised_host;
  std::unique_ptr<WorkerControlService> service;
  std::unique_ptr<StoreServer> store;
  std::unique_ptr<grpc::Server> server;
  std::vector<pid_t> pids;  // fixed before the supervisor starts
  std::thread supervisor;
  std::thread sender;
  absl::Mutex stop_mu;  // serialises Stop()'s join / inline teardown
  bool stopped ABSL_GUARDED_BY(stop_mu) = false;

  mutable absl::Mutex mu;
  PoolPhase phase ABSL_GUARDED_BY(mu) = PoolPhase::kStarting;
  absl::Status failure ABSL_GUARDED_BY(mu);
  bool stop_requested ABSL_GUARDED_BY(mu) = false;
  std::string stop_reason ABSL_GUARDED_BY(mu);
  int num_refused ABSL_GUARDED_BY(mu) = 0;  // streams that did not prove the token
  std::string last_refusal ABSL_GUARDED_BY(mu);
  // Attach order until the pool serves, then rank order.
  std::vector<std::shared_ptr<WorkerConnection>> conns ABSL_GUARDED_BY(mu);
  std::vector<bool> rank_held ABSL_GUARDED_BY(mu);  // [tp] once a worker has attached
  int num_closed ABSL_GUARDED_BY(mu) = 0;
  std::vector<int> ready_blocks ABSL_GUARDED_BY(mu);  // [tp], by rank: -1 until Ready
  int num_ready ABSL_GUARDED_BY(mu) = 0;
  int num_kv_blocks ABSL_GUARDED_BY(mu) = 0;
  uint64_t last_step ABSL_GUARDED_BY(mu) = 0;
  uint64_t awaited_step ABSL_GUARDED_BY(mu) = 0;  // 0: no step in flight
  // When RunStep handed awaited_step's plan to the sender: the step deadline counts from
  // there, so a rank that stops reading (its stream's window full, the sender's write
  // blocked) fails the step in time too.
  absl::Time step_started ABSL_GUARDED_BY(mu) = absl::InfiniteFuture();
  absl::Duration step_allowed ABSL_GUARDED_BY(mu);  // its deadline, from step_started
  std::shared_ptr<const worker::v1::FrontendMessage> outbox ABSL_GUARDED_BY(mu);  // for sender
  int num_delivered ABSL_GUARDED_BY(mu) = 0;  // ranks the awaited plan was written to
  bool sender_exit ABSL_GUARDED_BY(mu) = false;
  std::vector<std::optional<worker::v1::StepResult>> results ABSL_GUARDED_BY(mu);
  int num_results ABSL_GUARDED_BY(mu) = 0;
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_POOL_WORKER_POOL_IMPL_H_
