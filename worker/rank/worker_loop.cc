#include "worker/rank/worker_loop.h"

#include <unistd.h>

#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
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

WorkerMessage Hello(const std::string& device) {
  WorkerMessage m;
  m.mutable_hello()->set_protocol_version(kWorkerProtocolVersion);
  m.mutable_hello()->set_pid(getpid());
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  m.mutable_hello()->set_hostname(host);
  m.mutable_hello()->set_device(device.empty() ? "cpu" : device);
  return m;
}

}  // namespace

namespace {

class Session {
 public:
  Session(FrontendStream& stream, std::string device)
      : stream_(stream), device_(std::move(device)) {}

  absl::Status Run() {
    if (!stream_.Send(Hello(device_))) {
      return absl::UnavailableError("the frontend closed the stream");
    }
    FrontendMessage m;
    if (!stream_.Next(&m)) return absl::UnavailableError("the frontend closed the stream");
    if (m.has_shutdown()) return absl::OkStatus();
    if (!m.has_assignment()) return Fail(absl::FailedPreconditionError("expected an Assignment"));
    const absl::Time start = absl::Now();
    absl::StatusOr<Assignment> assignment = ForThisDevice(m.assignment(), device_);
    if (!assignment.ok()) return Fail(assignment.status());
    absl::StatusOr<std::unique_ptr<RankExecutor>> rank = BuildRank(*assignment);
    if (!rank.ok()) return Fail(rank.status());
    WorkerMessage ready;
    ready.mutable_ready()->set_num_kv_blocks((*rank)->num_kv_blocks());
    ready.mutable_ready()->set_load_time_ms(absl::ToInt64Milliseconds(absl::Now() - start));
    if (!stream_.Send(ready)) return absl::UnavailableError("the frontend closed the stream");
    return Serve(**rank);
  }

 private:
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
  std::string device_;
};

}  // namespace

absl::Status RunWorkerLoop(const WorkerLoopOptions& options) {
  TPSERVE_ASSIGN_OR_RETURN(std::unique_ptr<FrontendStream> stream,
                           FrontendStream::Connect(options.frontend, options.connect_timeout, [] {
                             std::fprintf(stderr,
                                          "tpserve_worker: the frontend's stream ended; exiting\n");
                             _exit(kExitFrontendLost);
                           }));
  absl::Status s = Session(*stream, options.device).Run();
  stream->Close(s.ok() ? absl::ZeroDuration() : kErrorLinger);
  return s;
}

}  // namespace tpserve
