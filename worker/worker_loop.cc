#include "worker/worker_loop.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/comm/gloo_comm_group.h"
#include "worker/frontend_stream.h"
#include "worker/protocol_version.h"

namespace tpserve {

using worker::v1::Assignment;
using worker::v1::FrontendMessage;
using worker::v1::WorkerMessage;

namespace {

// Waits this long after sending Error for the frontend to end the call.
constexpr absl::Duration kErrorLinger = absl::Seconds(2);

WorkerMessage Hello() {
  WorkerMessage m;
  m.mutable_hello()->set_protocol_version(kWorkerProtocolVersion);
  m.mutable_hello()->set_pid(getpid());
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  m.mutable_hello()->set_hostname(host);
  m.mutable_hello()->set_device("cpu");
  return m;
}

// Bytes the KV cache of this rank may take, from the assignment's budget.
int64_t KvBudget(const worker::v1::KvCacheSpec& kv, int world_size) {
  if (kv.memory_bytes() > 0) return kv.memory_bytes();
  if (kv.memory_fraction() <= 0 || kv.memory_fraction() > 1) return 0;
  // CPU ranks of one host share its memory.
  const double available = double(sysconf(_SC_AVPHYS_PAGES)) * double(sysconf(_SC_PAGESIZE));
  return static_cast<int64_t>(available * kv.memory_fraction() / std::max(world_size, 1));
}

absl::Status ValidateAssignment(const Assignment& a) {
  if (a.world_size() < 1 || a.rank() < 0 || a.rank() >= a.world_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("assignment: rank ", a.rank(), " outside world_size ", a.world_size()));
  }
  if (a.device() != "cpu") {
    return absl::UnimplementedError(
        absl::StrCat("assignment: device \"", a.device(), "\": this worker runs on cpu only"));
  }
  if (!a.dtype().empty() && a.dtype() != "float32") {
    return absl::UnimplementedError(
        absl::StrCat("assignment: dtype \"", a.dtype(), "\": the CPU backend computes in float32"));
  }
  if (a.world_size() > 1 && a.comm_backend() != "gloo") {
    return absl::UnimplementedError(absl::StrCat("assignment: comm_backend \"", a.comm_backend(),
                                                 "\": the CPU backend uses gloo"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<RankExecutor>> BuildRank(const Assignment& a) {
  if (absl::Status s = ValidateAssignment(a); !s.ok()) return s;
  absl::StatusOr<ModelFiles> files = OpenModel(a.model_dir(), a.world_size());
  if (!files.ok()) return files.status();
  GlooOptions gloo;
  gloo.rank = a.rank();
  gloo.size = a.world_size();
  gloo.store_host = a.store_host();
  gloo.store_port = a.store_port();
  gloo.prefix = a.store_key_prefix();
  if (a.comm_timeout_ms() > 0) gloo.timeout = absl::Milliseconds(a.comm_timeout_ms());
  // Peers attach and open their files at different times; the frontend's start timeout
  // bounds the whole start anyway.
  gloo.connect_timeout = std::max(gloo.timeout, absl::Minutes(5));
  absl::StatusOr<std::unique_ptr<GlooCommGroup>> comm = GlooCommGroup::Create(gloo);
  if (!comm.ok()) return comm.status();
  RankExecutorOptions options;
  options.block_size = a.kv_cache().block_size();
  options.num_blocks = a.kv_cache().num_blocks();
  options.kv_memory_bytes = KvBudget(a.kv_cache(), a.world_size());
  options.max_context = a.max_context();
  options.max_sequences = a.max_sequences();
  options.max_batch_tokens = a.max_batch_tokens();
  return RankExecutor::Create(*files, *std::move(comm), options);
}

namespace {

class Session {
 public:
  explicit Session(FrontendStream& stream) : stream_(stream) {}

  absl::Status Run() {
    if (!stream_.Send(Hello())) return absl::UnavailableError("the frontend closed the stream");
    FrontendMessage m;
    if (!stream_.Next(&m)) return absl::UnavailableError("the frontend closed the stream");
    if (m.has_shutdown()) return absl::OkStatus();
    if (!m.has_assignment()) return Fail(absl::FailedPreconditionError("expected an Assignment"));
    const absl::Time start = absl::Now();
    absl::StatusOr<std::unique_ptr<RankExecutor>> rank = BuildRank(m.assignment());
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
};

}  // namespace

absl::Status RunWorkerLoop(const WorkerLoopOptions& options) {
  absl::StatusOr<std::unique_ptr<FrontendStream>> stream =
      FrontendStream::Connect(options.frontend, options.connect_timeout, [] {
        std::fprintf(stderr, "tpserve_worker: the frontend's stream ended; exiting\n");
        _exit(kExitFrontendLost);
      });
  if (!stream.ok()) return stream.status();
  absl::Status s = Session(**stream).Run();
  (*stream)->Close(s.ok() ? absl::ZeroDuration() : kErrorLinger);
  return s;
}

}  // namespace tpserve
