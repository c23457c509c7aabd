// The pool's life: Begin (worker token, store, control server, spawned ranks, the
// sender), AwaitReady (every rank attached and loaded), Supervise (exited ranks, and
// any failure: on_failure, then the teardown), Fail, Stop and Teardown (no rank
// outlives the pool).
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
#include "rendezvous/worker_token.h"
#include "server/pool/control_address.h"
#include "server/pool/rank_spawn.h"
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
  if (options.spawn_workers || options.worker_token_file.empty()) {
    TPSERVE_ASSIGN_OR_RETURN(worker_token, GenerateWorkerToken());
  } else {
    TPSERVE_ASSIGN_OR_RETURN(worker_token, ReadWorkerTokenFile(options.worker_token_file));
  }
  TPSERVE_ASSIGN_OR_RETURN(const int port, StartServers());
  if (options.spawn_workers) TPSERVE_RETURN_IF_ERROR(SpawnRanks(port));
  sender = std::thread([this] { SendPlans(); });
  supervisor = std::thread([this] { Supervise(); });
  return absl::OkStatus();
}

absl::StatusOr<int> WorkerPool::Impl::StartServers() {
  StoreServerOptions store_options;
  const StoreAddress derived = StoreAddressFor(options.control_address);
  store_options.bind_host = options.store_host.empty() ? derived.bind_host : options.store_host;
  store_advertised_host = !options.advertise_host.empty() ? options.advertise_host
                          : options.store_host.empty()    ? derived.advertised_host
                                                          : options.store_host;
  store_options.token = worker_token;
  TPSERVE_ASSIGN_OR_RETURN(store, StoreServer::Start(store_options));
  service = std::make_unique<WorkerControlService>(this, worker_token);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options.control_address, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(service.get());
  builder.SetMaxReceiveMessageSize(INT_MAX);
  builder.SetMaxSendMessageSize(INT_MAX);
  // A rank on a host that is gone or cut off ends its stream within seconds (the pool
  // then fails, and its requests with it), not at the step timeout.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, kControlKeepaliveMs);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kControlKeepaliveTimeoutMs);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             kControlKeepaliveMs / 2);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return absl::UnavailableError(
        absl::StrCat("worker pool: cannot serve WorkerControl on ", options.control_address));
  }
  return port;
}

absl::Status WorkerPool::Impl::SpawnRanks(int bound_port) {
  if (access(options.worker_binary.c_str(), X_OK) != 0) {
    return absl::NotFoundError(
        absl::StrCat("worker pool: worker_binary ", options.worker_binary, " is not executable"));
  }
  const std::string dial = DialAddress(options.control_address, bound_port);
  for (int r = 0; r < options.tp; ++r) {
    TPSERVE_ASSIGN_OR_RETURN(
        pid_t pid, SpawnWithToken({options.worker_binary, "--frontend", dial, "--log-level",
                                   options.worker_log_level, "--threads",
                                   absl::StrCat(options.worker_threads)},
                                  worker_token));
    pids.push_back(pid);
  }
  return absl::OkStatus();
}

absl::Status WorkerPool::Impl::AwaitReady() {
  absl::MutexLock lock(&mu);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return num_ready == options.tp || !failure.ok();
  };
  if (!mu.AwaitWithTimeout(absl::Condition(&done), options.start_timeout)) {
    std::string refused;
    if (num_refused > 0) {
      refused = absl::StrCat("; refused ", num_refused,
                             " connection(s) that did not prove the worker token (last: ",
                             last_refusal, ")");
    }
    if (!options.spawn_workers && options.worker_token_file.empty()) {
      absl::StrAppend(&refused, "; no worker token file is configured (tpserve "
                                "--worker-token-file), so no external worker can join");
    }
    Fail(absl::DeadlineExceededError(absl::StrCat(
        "worker pool: ", conns.size(), " of ", options.tp, " workers attached and ", num_ready,
        " ready within ", absl::FormatDuration(options.start_timeout), refused)));
  }
  if (!failure.ok()) return failure;
  num_kv_blocks = *std::min_element(ready_blocks.begin(), ready_blocks.end());
  std::sort(conns.begin(), conns.end(),
            [](const auto& a, const auto& b) { return a->rank < b->rank; });
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
  absl::Status lost;  // a serving pool's failure, for on_failure
  while (true) {
    {
      absl::MutexLock lock(&mu);
      auto wake = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
        return !failure.ok() || stop_requested;
      };
      mu.AwaitWithTimeout(absl::Condition(&wake), kPollInterval);
      if (!failure.ok() || stop_requested) {
        if (phase == PoolPhase::kServing) lost = failure;
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
  if (!lost.ok() && options.on_failure) options.on_failure(lost);
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
  // Never blocks: a stream stuck in a write (the sender's, to a rank that stopped
  // reading) is cancelled at once; the write itself ends when that rank does.
  for (const auto& conn : snapshot) {
    if (!conn->TryWrite(shutdown)) conn->Cancel();
  }
  if (running.empty()) {  // external workers (or none left): time to leave on their own
    absl::MutexLock lock(&mu);
    auto all_closed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
      return num_closed == static_cast<int>(snapshot.size());
    };
    mu.AwaitWithTimeout(absl::Condition(&all_closed), options.stop_grace);
  }
  // Spawned ranks get stop_grace to exit after the Shutdown, then SIGTERM, then SIGKILL.
  TerminateAndReap(running, options.stop_grace);
  for (const auto& conn : snapshot) conn->Cancel();
  if (sender.joinable()) {
    {
      absl::MutexLock lock(&mu);
      sender_exit = true;
    }
    sender.join();
  }
  if (server != nullptr) {
    server->Shutdown(absl::ToChronoTime(absl::Now() + kServerShutdownGrace));
    server->Wait();
  }
  if (store != nullptr) store->Stop();
  if (std::optional<std::string> path = UnixSocketPath(options.control_address)) {
    unlink(path->c_str());
  }
}

}  // namespace tpserve
