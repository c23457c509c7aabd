// The pool's life: Begin (store, control server, spawned ranks), AwaitReady (every
// rank attached and loaded), Supervise (deaths and missed step deadlines), Fail, Stop
// and Teardown (no rank outlives the pool).
#include "server/pool/worker_pool.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <optional>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/status_macros.h"
#include "base/subprocess.h"
#include "grpcpp/grpcpp.h"
#include "rendezvous/store_server.h"
#include "server/pool/control_address.h"
#include "server/pool/worker_pool_impl.h"
#include "tpserve/v1/protocol_version.h"

namespace tpserve {

using worker::v1::FrontendMessage;
using worker::v1::StepPlan;
using worker::v1::StepResult;
using worker::v1::WorkerMessage;

namespace {

constexpr absl::Duration kPollInterval = absl::Milliseconds(20);
constexpr absl::Duration kServerShutdownGrace = absl::Seconds(1);

}  // namespace

absl::Status WorkerPool::Impl::Begin() {
  TPSERVE_ASSIGN_OR_RETURN(store, StoreServer::Start(options.store_host, 0));
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options.control_address, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  builder.SetMaxReceiveMessageSize(INT_MAX);
  builder.SetMaxSendMessageSize(INT_MAX);
  server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return absl::UnavailableError(
        absl::StrCat("worker pool: cannot serve WorkerControl on ", options.control_address));
  }
  if (options.spawn_workers) {
    if (access(options.worker_binary.c_str(), X_OK) != 0) {
      return absl::NotFoundError(
          absl::StrCat("worker pool: worker_binary ", options.worker_binary, " is not executable"));
    }
    const std::string dial = DialAddress(options.control_address, port);
    for (int r = 0; r < options.tp; ++r) {
      TPSERVE_ASSIGN_OR_RETURN(pid_t pid, Spawn({options.worker_binary, "--frontend", dial}));
      pids.push_back(pid);
    }
  }
  supervisor = std::thread([this] { Supervise(); });
  return absl::OkStatus();
}

absl::Status WorkerPool::Impl::AwaitReady() {
  absl::MutexLock lock(&mu);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return num_ready == options.tp || !failure.ok();
  };
  if (!mu.AwaitWithTimeout(absl::Condition(&done), options.start_timeout)) {
    Fail(absl::DeadlineExceededError(absl::StrCat(
        "worker pool: ", conns.size(), " of ", options.tp, " workers attached and ", num_ready,
        " ready within ", absl::FormatDuration(options.start_timeout))));
  }
  if (!failure.ok()) return failure;
  num_kv_blocks = *std::min_element(ready_blocks.begin(), ready_blocks.end());
  phase = PoolPhase::kServing;
  return absl::OkStatus();
}

void WorkerPool::Impl::Fail(const absl::Status& s) {
  if (phase == PoolPhase::kStopping || !failure.ok()) return;
  failure = s;
}

void WorkerPool::Impl::Stop(const std::string& reason) {
  {
    absl::MutexLock lock(&mu);
    if (!stop_requested) {
      stop_requested = true;
      stop_reason = reason;
    }
  }
  absl::MutexLock lock(&stop_mu);
  if (stopped) return;
  stopped = true;
  if (supervisor.joinable()) {
    supervisor.join();
  } else {  // Begin() failed before the supervisor started
    Teardown(pids);
  }
}

void WorkerPool::Impl::Supervise() {
  std::vector<pid_t> running = pids;
  while (true) {
    {
      absl::MutexLock lock(&mu);
      auto wake = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
        return !failure.ok() || stop_requested;
      };
      if (mu.AwaitWithTimeout(absl::Condition(&wake), kPollInterval)) break;
      // RunStep's own wait covers a step once its plan is sent; this covers the sending,
      // which blocks for as long as a rank does not read.
      if (absl::Now() > step_started + options.step_timeout + kPollInterval) {
        Fail(absl::DeadlineExceededError(absl::StrCat(
            "step ", awaited_step, " was not delivered to every rank within ",
            absl::FormatDuration(options.step_timeout), " (a rank stopped reading)")));
        break;
      }
    }
    for (auto it = running.begin(); it != running.end();) {
      std::optional<ChildExit> exit = PollChild(*it);
      if (!exit) {
        ++it;
        continue;
      }
      absl::MutexLock lock(&mu);
      Fail(absl::UnavailableError(absl::StrCat("worker process ", *it, " ended (",
                                               DescribeExit(*exit), ")")));
      it = running.erase(it);
    }
  }
  Teardown(running);
}

void WorkerPool::Impl::Teardown(const std::vector<pid_t>& running) {
  std::vector<std::shared_ptr<WorkerConnection>> snapshot;
  FrontendMessage shutdown;
  {
    absl::MutexLock lock(&mu);
    phase = PoolPhase::kStopping;
    snapshot = conns;
    shutdown.mutable_shutdown()->set_reason(failure.ok() ? stop_reason
                                                         : std::string(failure.message()));
  }
  // Never blocks: a stream stuck in a write (a rank that stopped reading) is cancelled
  // below, which also ends that write.
  for (const auto& conn : snapshot) conn->TryWrite(shutdown);
  {
    absl::MutexLock lock(&mu);
    auto all_closed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
      return num_closed == static_cast<int>(snapshot.size());
    };
    mu.AwaitWithTimeout(absl::Condition(&all_closed), options.stop_grace);
  }
  TerminateAndReap(running, options.stop_grace);
  for (const auto& conn : snapshot) conn->Cancel();
  if (server != nullptr) {
    server->Shutdown(absl::ToChronoTime(absl::Now() + kServerShutdownGrace));
    server->Wait();
  }
  if (store != nullptr) store->Stop();
  if (std::optional<std::string> path = UnixSocketPath(options.control_address)) {
    unlink(path->c_str());
  }
  absl::MutexLock lock(&mu);
  torn_down = true;
}

}  // namespace tpserve
