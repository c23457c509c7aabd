// The receive half of the control plane: what the workers' streams deliver to the pool
// (a refused stream; an authenticated Hello, answered with the rank's Assignment; step
// results, errors and goodbyes; a closed stream), on the connections' reader threads.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/pool/worker_pool_impl.h"
#include "tpserve/v1/protocol_version.h"

namespace tpserve {

using worker::v1::FrontendMessage;
using worker::v1::StepPlan;
using worker::v1::StepResult;
using worker::v1::WorkerMessage;

namespace {

std::string Who(const WorkerConnection& c) {
  return absl::StrCat("worker rank ", c.rank, " (pid ", c.pid, ")");
}

absl::StatusCode ToCode(int code) {
  return code > 0 && code <= 16 ? static_cast<absl::StatusCode>(code) : absl::StatusCode::kUnknown;
}

}  // namespace

FrontendMessage WorkerPool::Impl::MakeAssignment(int rank) const {
  FrontendMessage m;
  worker::v1::Assignment* a = m.mutable_assignment();
  a->set_rank(rank);
  a->set_world_size(options.tp);
  a->set_model_dir(options.model_dir);
  const bool cuda = options.device == "cuda";
  // Spawned ranks share one host: rank r drives GPU r (a worker's --device cuda:N overrides).
  a->set_device(cuda ? absl::StrCat("cuda:", rank) : options.device);
  a->set_dtype(options.dtype);
  a->set_quantization(options.quantization);
  a->set_comm_backend(cuda ? "nccl" : "gloo");
  a->set_store_host(store_advertised_host);
  a->set_store_port(store->port());
  a->set_store_key_prefix(absl::StrCat("tpserve/gen", options.generation));
  const absl::Duration comm =
      options.comm_timeout > absl::ZeroDuration() ? options.comm_timeout : options.step_timeout;
  a->set_comm_timeout_ms(static_cast<int32_t>(
      std::min<int64_t>(absl::ToInt64Milliseconds(comm), INT32_MAX)));
  a->mutable_kv_cache()->set_block_size(options.kv_block_size);
  a->mutable_kv_cache()->set_dtype(options.kv_cache_dtype);
  a->mutable_kv_cache()->set_num_blocks(options.kv_num_blocks);
  a->mutable_kv_cache()->set_memory_bytes(options.kv_memory_bytes);
  a->mutable_kv_cache()->set_memory_fraction(static_cast<float>(options.kv_memory_fraction));
  *a->mutable_limits() = options.limits;
  a->set_eager_decode(options.eager_decode);
  return m;
}

void WorkerPool::Impl::OnRefused(const worker::v1::Hello& hello, const std::string& why) {
  absl::MutexLock lock(&mu);
  ++num_refused;
  last_refusal = absl::StrCat("pid ", hello.pid(), " on ",
                              hello.hostname().empty() ? "?" : hello.hostname().substr(0, 64),
                              ": ", why);
}

absl::StatusOr<FrontendMessage> WorkerPool::Impl::OnHello(
    const std::shared_ptr<WorkerConnection>& conn, const worker::v1::Hello& hello) {
  absl::MutexLock lock(&mu);
  if (phase != PoolPhase::kStarting || static_cast<int>(conns.size()) == options.tp) {
    // UNAVAILABLE: a worker tries again, and joins the next generation.
    return absl::UnavailableError(
        "this worker pool is not accepting workers (it has all its ranks, or is stopping)");
  }
  if (hello.protocol_version() != kWorkerProtocolVersion) {
    absl::Status s = absl::FailedPreconditionError(
        absl::StrCat("worker pid ", hello.pid(), " speaks protocol ", hello.protocol_version(),
                     ", the frontend ", kWorkerProtocolVersion, ": mixed builds"));
    Fail(s);
    return s;
  }
  if (rank_held.empty()) {
    rank_held.assign(options.tp, false);
    ready_blocks.assign(options.tp, -1);
  }
  int rank = 0;
  if (hello.has_requested_rank()) {
    rank = hello.requested_rank();
    if (rank < 0 || rank >= options.tp) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Hello.requested_rank ", rank, " is out of range: this pool has ranks 0 to ",
          options.tp - 1, " (tpserve --tp ", options.tp, ")"));
    }
    if (rank_held[rank]) {
      return absl::AlreadyExistsError(absl::StrCat(
          "Hello.requested_rank ", rank, ": another worker holds rank ", rank,
          " of this pool (two workers started with the same --rank?)"));
    }
  } else {
    while (rank_held[rank]) ++rank;  // conns.size() < tp: a rank is free
  }
  rank_held[rank] = true;
  conn->rank = rank;
  conn->pid = hello.pid();
  conns.push_back(conn);
  return MakeAssignment(rank);
}

void WorkerPool::Impl::OnMessage(const WorkerConnection& conn, const WorkerMessage& m) {
  absl::MutexLock lock(&mu);
  const int r = conn.rank;
  switch (m.kind_case()) {
    case WorkerMessage::kReady:
      if (phase != PoolPhase::kStarting || ready_blocks[r] >= 0 || m.ready().num_kv_blocks() < 1) {
        break;
      }
      ready_blocks[r] = m.ready().num_kv_blocks();
      ++num_ready;
      return;
    case WorkerMessage::kError: {
      const worker::v1::Error& e = m.error();
      Fail(absl::Status(ToCode(e.code()),
                        absl::StrCat(Who(conn), " failed",
                                     e.step() > 0 ? absl::StrCat(" at step ", e.step()) : "",
                                     ": ", e.message())));
      return;
    }
    case WorkerMessage::kStepResult:
      if (awaited_step == 0 || results[r].has_value() || m.step_result().step() != awaited_step) {
        break;
      }
      results[r] = m.step_result();
      ++num_results;
      return;
    default:
      break;
  }
  Fail(absl::InternalError(absl::StrCat(Who(conn), " broke the protocol: unexpected ",
                                        m.ShortDebugString().substr(0, 200))));
}

void WorkerPool::Impl::OnClosed(const WorkerConnection& conn) {
  absl::MutexLock lock(&mu);
  ++num_closed;
  Fail(absl::UnavailableError(absl::StrCat(Who(conn), " closed its stream")));
}

}  // namespace tpserve
