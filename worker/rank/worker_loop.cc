#include "worker/rank/worker_loop.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tpserve/v1/protocol_version.h"
#include "worker/comm/gloo_comm_group.h"
#include "worker/kv_cache.h"
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

// Bytes the KV cache of this CPU rank may take, from the assignment's budget.
int64_t CpuKvBudget(const worker::v1::KvCacheSpec& kv, int world_size) {
  if (kv.memory_bytes() > 0) return kv.memory_bytes();
  if (kv.memory_fraction() <= 0 || kv.memory_fraction() > 1) return 0;
  // CPU ranks of one host share its memory.
  const double available = static_cast<double>(AvailableHostBytes());
  return static_cast<int64_t>(available * kv.memory_fraction() / std::max(world_size, 1));
}

// The ordinal of "cuda:<n>" ("cuda" alone is device 0), or INVALID_ARGUMENT.
absl::StatusOr<int> CudaOrdinal(const std::string& device) {
  if (device == "cuda") return 0;
  if (!absl::StartsWith(device, "cuda:")) {
    return absl::UnimplementedError(absl::StrCat(
        "assignment: device \"", device, "\": this worker runs on \"cpu\" or \"cuda:<ordinal>\""));
  }
  int ordinal = -1;
  if (!absl::SimpleAtoi(device.substr(5), &ordinal) || ordinal < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "assignment: device \"", device, "\": expected \"cpu\" or \"cuda:<ordinal>\""));
  }
  return ordinal;
}

absl::Status ValidateAssignment(const Assignment& a) {
  if (a.world_size() < 1 || a.rank() < 0 || a.rank() >= a.world_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("assignment: rank ", a.rank(), " outside world_size ", a.world_size()));
  }
  if (a.device() != "cpu") {
    if (absl::Status s = CudaOrdinal(a.device()).status(); !s.ok()) return s;
    if (absl::Status s = ParseDeviceDType(a.dtype().empty() ? "bfloat16" : a.dtype()).status();
        !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("assignment: ", s.message()));
    }
    if (a.comm_backend() != "nccl") {
      return absl::InvalidArgumentError(absl::StrCat(
          "assignment: comm_backend \"", a.comm_backend(), "\": CUDA ranks use nccl"));
    }
    return absl::OkStatus();
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

RankExecutorOptions ExecutorOptions(const Assignment& a) {
  RankExecutorOptions options;
  options.block_size = a.kv_cache().block_size();
  options.num_blocks = a.kv_cache().num_blocks();
  options.max_context = a.max_context();
  options.max_sequences = a.max_sequences();
  options.max_batch_tokens = a.max_batch_tokens();
  return options;
}

absl::Duration CommTimeout(const Assignment& a) {
  return a.comm_timeout_ms() > 0 ? absl::Milliseconds(a.comm_timeout_ms()) : absl::Seconds(60);
}

absl::StatusOr<std::unique_ptr<RankExecutor>> BuildCpuRank(const Assignment& a,
                                                           const ModelFiles& files) {
  GlooOptions gloo;
  gloo.rank = a.rank();
  gloo.size = a.world_size();
  gloo.store_host = a.store_host();
  gloo.store_port = a.store_port();
  gloo.prefix = a.store_key_prefix();
  gloo.timeout = CommTimeout(a);
  // Peers attach and open their files at different times; the frontend's start timeout
  // bounds the whole start anyway.
  gloo.connect_timeout = std::max(gloo.timeout, absl::Minutes(5));
  absl::StatusOr<std::unique_ptr<GlooCommGroup>> comm = GlooCommGroup::Create(gloo);
  if (!comm.ok()) return comm.status();
  RankExecutorOptions options = ExecutorOptions(a);
  options.kv_memory_bytes = CpuKvBudget(a.kv_cache(), a.world_size());
  return RankExecutor::Create(files, *std::move(comm), options);
}

absl::StatusOr<std::unique_ptr<RankExecutor>> BuildCudaRank(const Assignment& a,
                                                            const ModelFiles& files) {
  NcclOptions nccl;
  nccl.rank = a.rank();
  nccl.size = a.world_size();
  nccl.device = *CudaOrdinal(a.device());  // validated
  nccl.store_host = a.store_host();
  nccl.store_port = a.store_port();
  nccl.prefix = absl::StrCat(a.store_key_prefix(), "/");
  nccl.timeout = CommTimeout(a);
  nccl.connect_timeout = std::max(nccl.timeout, absl::Minutes(5));
  CudaModelOptions model;
  model.dtype = *ParseDeviceDType(a.dtype().empty() ? "bfloat16" : a.dtype());
  if (a.max_batch_tokens() > 0) model.max_batch_tokens = a.max_batch_tokens();
  if (a.max_sequences() > 0) model.max_sequences = a.max_sequences();
  model.max_sequences = std::min(model.max_sequences, model.max_batch_tokens);
  model.max_context = a.max_context();  // 0: the model's
  model.step_timeout = nccl.timeout;
  model.cuda_graphs = !a.eager_decode();
  absl::StatusOr<CudaRank> rank = LoadCudaRank(files, nccl, model);
  if (!rank.ok()) return rank.status();
  std::fprintf(stderr, "tpserve_worker: rank %d: decode steps %s\n", a.rank(),
               model.cuda_graphs ? "replay CUDA graphs" : "run eagerly (--enforce-eager)");
  RankExecutorOptions options = ExecutorOptions(a);
  // The plans must respect the buffers' limits, so the executor checks them too.
  options.max_batch_tokens = model.max_batch_tokens;
  options.max_sequences = model.max_sequences;
  options.kv_memory_bytes = a.kv_cache().memory_bytes();
  if (options.num_blocks == 0 && options.kv_memory_bytes == 0) {
    // Sized after the weights and activations took their share of the device.
    absl::StatusOr<int64_t> budget = CudaKvBudgetBytes(
        a.kv_cache().memory_fraction() > 0 ? a.kv_cache().memory_fraction() : 0.9);
    if (!budget.ok()) return budget.status();
    options.kv_memory_bytes = *budget;
  }
  return RankExecutor::Create(std::move(rank->comm), std::move(rank->model), options);
}

}  // namespace

absl::StatusOr<Assignment> ForThisDevice(const Assignment& a, const std::string& device) {
  if (device.empty() || device == a.device()) return a;
  const bool cuda_worker = absl::StartsWith(device, "cuda");
  const bool cuda_assignment = absl::StartsWith(a.device(), "cuda");
  if (cuda_worker != cuda_assignment) {
    return absl::FailedPreconditionError(absl::StrCat(
        "assignment: device \"", a.device(), "\", but this worker was started with --device ",
        device));
  }
  Assignment mine = a;
  if (device != "cuda") mine.set_device(device);  // "cuda:<n>": this host's GPU n
  return mine;
}

absl::StatusOr<std::unique_ptr<RankExecutor>> BuildRank(const Assignment& a) {
  if (absl::Status s = ValidateAssignment(a); !s.ok()) return s;
  absl::StatusOr<ModelFiles> files = OpenModel(a.model_dir(), a.world_size());
  if (!files.ok()) return files.status();
  // Positions past the model's table would be refused mid-step, after the plan was
  // taken, and cost the whole pool: refuse the assignment instead.
  if (a.max_context() > files->config.max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat(
        "assignment: max_context ", a.max_context(), " exceeds the model's ",
        "max_position_embeddings ", files->config.max_position_embeddings));
  }
  return a.device() == "cpu" ? BuildCpuRank(a, *files) : BuildCudaRank(a, *files);
}

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
  absl::StatusOr<std::unique_ptr<FrontendStream>> stream =
      FrontendStream::Connect(options.frontend, options.connect_timeout, [] {
        std::fprintf(stderr, "tpserve_worker: the frontend's stream ended; exiting\n");
        _exit(kExitFrontendLost);
      });
  if (!stream.ok()) return stream.status();
  absl::Status s = Session(**stream, options.device).Run();
  (*stream)->Close(s.ok() ? absl::ZeroDuration() : kErrorLinger);
  return s;
}

}  // namespace tpserve
