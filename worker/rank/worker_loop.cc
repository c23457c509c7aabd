#include "worker/rank/worker_loop.h"

#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "rendezvous/worker_token.h"
#include "spdlog/spdlog.h"
#include "tpserve/v1/protocol_version.h"
#include "worker/rank/frontend_stream.h"
#include "worker/rank/rank_builder.h"

namespace tpserve {

using worker::v1::Assignment;
using worker::v1::FrontendMessage;
using worker::v1::WorkerMessage;

namespace {

// Waits this long after sending Error for the frontend to end the call.
constexpr absl::Duration kErrorLinger = absl::Seconds(2);
// Between tries to join a pool that did not let this worker in.
constexpr absl::Duration kRejoinWait = absl::Milliseconds(500);

WorkerMessage Hello(const std::string& device, std::optional<int> rank) {
  WorkerMessage m;
  m.mutable_hello()->set_protocol_version(kWorkerProtocolVersion);
  m.mutable_hello()->set_pid(getpid());
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  m.mutable_hello()->set_hostname(host);
  m.mutable_hello()->set_device(device.empty() ? "cpu" : device);
  if (rank.has_value()) m.mutable_hello()->set_requested_rank(*rank);
  return m;
}

// The host of the frontend's address, where a store the Assignment leaves unnamed
// listens (loopback for a Unix socket).
std::string FrontendHost(const std::string& frontend) {
  if (absl::StartsWith(frontend, "unix:")) return "127.0.0.1";
  std::string host = frontend.substr(0, frontend.rfind(':'));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return host;
}

class Session {
 public:
  Session(FrontendStream& stream, const WorkerLoopOptions& options)
      : stream_(stream), options_(options) {}

  // Whether the frontend ended the stream before an Assignment with UNAVAILABLE (its
  // pool full or stopping, or the frontend going away): worth another try.
  bool let_in_later() const { return let_in_later_; }

  absl::Status Run() {
    FrontendMessage m;
    TPSERVE_RETURN_IF_ERROR(Join(&m));
    if (m.has_shutdown()) return Leave(m.shutdown());
    stream_.ExitOnLoss([] {
      spdlog::error("the frontend's stream ended; exiting");
      _exit(kExitFrontendLost);
    });
    const absl::Time start = absl::Now();
    absl::StatusOr<Assignment> assignment = ForThisDevice(m.assignment(), options_.device);
    if (!assignment.ok()) return Fail(assignment.status());
    SetLogName(absl::StrCat("tpserve_worker rank ", assignment->rank(), "/",
                            assignment->world_size()));
    spdlog::info("assigned: model {}, device {}, dtype {}", assignment->model_dir(),
                 options_.device.empty() ? "as assigned" : options_.device, assignment->dtype());
    if (assignment->store_host().empty()) {
      assignment->set_store_host(FrontendHost(options_.frontend));
    }
    absl::StatusOr<std::unique_ptr<RankExecutor>> rank = BuildRank(*assignment);
    if (!rank.ok()) return Fail(rank.status());
    WorkerMessage ready;
    ready.mutable_ready()->set_num_kv_blocks((*rank)->num_kv_blocks());
    ready.mutable_ready()->set_load_time_ms(absl::ToInt64Milliseconds(absl::Now() - start));
    spdlog::info("ready: {} KV blocks, loaded in {}", (*rank)->num_kv_blocks(),
                 absl::FormatDuration(absl::Now() - start));
    if (!stream_.Send(ready)) return absl::UnavailableError("the frontend closed the stream");
    return Serve(**rank);
  }

 private:
  // Hello → Challenge → Proof; `m` is then the Assignment, or a Shutdown (the pool needs
  // no more workers). A stream the frontend ends instead: its status (UNAUTHENTICATED
  // for a refused proof).
  absl::Status Join(FrontendMessage* m) {
    if (!stream_.Send(Hello(options_.device, options_.rank)) || !stream_.Next(m)) return Ended();
    if (m->has_shutdown()) return absl::OkStatus();
    if (!m->has_challenge()) {
      return Fail(absl::FailedPreconditionError(
          "expected a Challenge after Hello (a frontend of another protocol version?)"));
    }
    WorkerMessage proof;
    proof.mutable_proof()->set_hmac(
        ProveWorkerToken(options_.token, ProofChannel::kControl, m->challenge().nonce()));
    if (!stream_.Send(proof) || !stream_.Next(m)) return Ended();
    if (!m->has_assignment() && !m->has_shutdown()) {
      return Fail(absl::FailedPreconditionError("expected an Assignment"));
    }
    return absl::OkStatus();
  }

  absl::Status Ended() {
    absl::Status s = stream_.Close(absl::ZeroDuration());
    if (s.ok() || absl::IsCancelled(s)) return absl::UnavailableError("the frontend closed the stream");
    let_in_later_ = absl::IsUnavailable(s);
    return absl::Status(s.code(), absl::StrCat("the frontend ended the stream: ", s.message()));
  }

  static absl::Status Leave(const worker::v1::Shutdown& shutdown) {
    spdlog::info("the frontend sent Shutdown: {}", shutdown.reason());
    return absl::OkStatus();
  }

  absl::Status Serve(RankExecutor& rank) {
    FrontendMessage m;
    while (stream_.Next(&m)) {
      if (m.has_shutdown()) return absl::OkStatus();
      if (!m.has_step_plan()) {
        return Fail(absl::FailedPreconditionError("expected a StepPlan or a Shutdown"));
      }
      absl::StatusOr<worker::v1::StepResult> result = rank.Execute(m.step_plan());
      if (!result.ok()) return Fail(result.status(), m.step_plan().step());
      WorkerMessage out;
      *out.mutable_step_result() = *std::move(result);
      if (!stream_.Send(out)) break;
    }
    return absl::UnavailableError("the frontend closed the stream");
  }

  absl::Status Fail(const absl::Status& s, uint64_t step = 0) {
    WorkerMessage m;
    m.mutable_error()->set_code(static_cast<int>(s.code()));
    m.mutable_error()->set_message(std::string(s.message()));
    m.mutable_error()->set_step(step);
    stream_.Send(m);
    return s;
  }

  FrontendStream& stream_;
  const WorkerLoopOptions& options_;
  bool let_in_later_ = false;
};

}  // namespace

absl::Status RunWorkerLoop(const WorkerLoopOptions& options) {
  // The comm groups' store connections prove the same token.
  SetProcessWorkerToken(options.token);
  const absl::Time deadline = absl::Now() + options.connect_timeout;
  while (true) {
    TPSERVE_ASSIGN_OR_RETURN(
        std::unique_ptr<FrontendStream> stream,
        FrontendStream::Connect(options.frontend,
                                std::max(deadline - absl::Now(), absl::Seconds(1))));
    Session session(*stream, options);
    absl::Status s = session.Run();
    stream->Close(s.ok() ? absl::ZeroDuration() : kErrorLinger).IgnoreError();
    // Not let in yet (the pool that answered is full or being replaced, or the frontend
    // is restarting): the next generation will be, within the connect timeout.
    if (!session.let_in_later() || absl::Now() + kRejoinWait > deadline) return s;
    spdlog::info("not let into the pool ({}); trying again", std::string(s.message()));
    absl::SleepFor(kRejoinWait);
  }
}

}  // namespace tpserve
