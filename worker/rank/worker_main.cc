// tpserve_worker (CPU ranks only; no CUDA library linked) and tpserve_worker_cuda (also
// --device cuda): one tensor-parallel rank, built from this file. Dials the frontend's WorkerControl service,
// proves it holds the pool's worker token, gets its rank, model and rendezvous from
// it, and runs StepPlans until Shutdown.
//
//   tpserve_worker --frontend unix:/run/tpserve/control.sock --worker-token-fd 3
//   tpserve_worker --frontend 10.0.0.5:7000 --worker-token-file /etc/tpserve/token
//                  [--device cuda:3] [--rank 2 | --host-index 1 --ranks-per-host 4 --local-rank 2]
//
// The frontend hands the ranks it spawns their token through an inherited pipe
// (--worker-token-fd, read and closed first thing); external workers read the file the
// frontend reads too (--worker-token-file). Exit status: 0 after Shutdown, 1 on an
// error (reported to the frontend first when the stream was up; a refused token is
// UNAUTHENTICATED), 2 on bad flags, 3 when the frontend's stream ends without a
// Shutdown.
#include <cstdio>
#include <limits>
#include <optional>
#include <utility>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/args.h"
#include "base/available_cpus.h"
#include "base/log.h"
#include "base/version.h"
#include "rendezvous/worker_token.h"
#include "spdlog/spdlog.h"
#include "worker/kernels/cpu/bf16_gemm.h"
#include "worker/kernels/cpu/cpu_threads.h"
#include "worker/kernels/cpu/gemm.h"
#include "worker/kernels/cpu/openblas_core.h"
#include "worker/rank/cuda_backend.h"
#include "worker/rank/worker_loop.h"

namespace tpserve {
namespace {

struct TokenFlags {
  int64_t fd = -1;
  std::string file;
};

// The worker token from exactly one of --worker-token-fd and --worker-token-file.
absl::StatusOr<std::string> ReadToken(const TokenFlags& flags) {
  if ((flags.fd >= 0) == !flags.file.empty()) {
    return absl::InvalidArgumentError("give one of --worker-token-fd and --worker-token-file");
  }
  if (!flags.file.empty()) return ReadWorkerTokenFile(flags.file);
  if (flags.fd > 1 << 20) return absl::InvalidArgumentError("--worker-token-fd is out of range");
  return ReadWorkerTokenFd(static_cast<int>(flags.fd));
}

// Where in the pool this worker asks to be: --rank R, or (a host or pod that runs
// several ranks, each its own process) --host-index I --ranks-per-host G --local-rank K
// for rank I·G + K. kNotGiven: the flag is absent.
constexpr int64_t kNotGiven = std::numeric_limits<int64_t>::min();
struct RankFlags {
  int64_t rank = kNotGiven;
  int64_t host_index = kNotGiven;
  int64_t ranks_per_host = kNotGiven;
  int64_t local_rank = kNotGiven;
};

// The rank the flags ask for, if any.
absl::StatusOr<std::optional<int>> RequestedRank(const RankFlags& f) {
  constexpr int64_t kMaxRank = 1 << 16;
  for (const auto& [name, value] : {std::pair<const char*, int64_t>{"rank", f.rank},
                                    {"host-index", f.host_index},
                                    {"local-rank", f.local_rank}}) {
    if (value != kNotGiven && value < 0) {
      return absl::InvalidArgumentError(absl::StrCat("--", name, " must be ≥ 0, not ", value));
    }
  }
  const bool placed =
      f.host_index >= 0 || f.ranks_per_host != kNotGiven || f.local_rank >= 0;
  if (f.rank >= 0 && placed) {
    return absl::InvalidArgumentError(
        "give --rank, or --host-index with --ranks-per-host and --local-rank, not both");
  }
  if (f.rank >= 0) {
    if (f.rank >= kMaxRank) return absl::InvalidArgumentError("--rank must be < 65536");
    return std::optional<int>(static_cast<int>(f.rank));
  }
  if (!placed) return std::optional<int>();
  if (f.host_index < 0) {
    return absl::InvalidArgumentError("--host-index is required with --local-rank or --ranks-per-host");
  }
  const int64_t per_host = f.ranks_per_host == kNotGiven ? 1 : f.ranks_per_host;
  const int64_t local = f.local_rank == kNotGiven ? 0 : f.local_rank;
  if (per_host < 1 || per_host > kMaxRank) {
    return absl::InvalidArgumentError("--ranks-per-host must be in [1, 65536]");
  }
  if (local >= per_host) {
    return absl::InvalidArgumentError(
        absl::StrCat("--local-rank ", local, " must be below --ranks-per-host ", per_host));
  }
  if (f.host_index >= kMaxRank / per_host) {
    return absl::InvalidArgumentError("--host-index × --ranks-per-host must be < 65536");
  }
  return std::optional<int>(static_cast<int>(f.host_index * per_host + local));
}

// --threads, or for 0 the CPUs this process may run on shared by its host's ranks.
absl::StatusOr<int> ComputeThreads(int64_t threads, const RankFlags& f) {
  constexpr int64_t kMaxThreads = 1024;
  if (threads < 0 || threads > kMaxThreads) {
    return absl::InvalidArgumentError(
        absl::StrCat("--threads must be in [0, ", kMaxThreads, "], got ", threads));
  }
  if (threads > 0) return static_cast<int>(threads);
  return CpusPerRank(f.ranks_per_host > 0 ? f.ranks_per_host : 1);
}

absl::Status CheckFlags(const WorkerLoopOptions& options, int64_t connect_timeout_s) {
  if (!options.device.empty() && options.device != "cpu" && options.device != "cuda") {
    int ordinal = -1;
    if (!absl::StartsWith(options.device, "cuda:") ||
        !absl::SimpleAtoi(options.device.substr(5), &ordinal) || ordinal < 0) {
      return absl::InvalidArgumentError("--device must be cpu, cuda or cuda:N");
    }
  }
  if (absl::StartsWith(options.device, "cuda") && !HasCudaBackend()) {
    return absl::FailedPreconditionError(
        "--device " + options.device +
        ": this tpserve_worker is built without CUDA; run tpserve_worker_cuda");
  }
  if (options.frontend.empty()) return absl::InvalidArgumentError("--frontend is required");
  if (connect_timeout_s < 1) return absl::InvalidArgumentError("--connect-timeout-s must be ≥ 1");
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  // First, before the token's descriptor is read: this may re-execute the program.
  const std::string openblas_note = UseOpenBlasKernelsForThisCpu(argv);
  WorkerLoopOptions options;
  int64_t connect_timeout_s = 30;
  TokenFlags token;
  ArgParser p("tpserve_worker", "tpserve_worker: one tensor-parallel rank of a tpserve pool.");
  p.SetVersion(VersionText("tpserve_worker"));
  p.AddString("frontend", &options.frontend, "the frontend's control address: unix:/path or host:port");
  p.AddInt("connect-timeout-s", &connect_timeout_s, "how long to try reaching the frontend (default 30)");
  p.AddString("device", &options.device,
              "cpu, cuda (the GPU the frontend assigns) or cuda:N (this host's GPU N); "
              "default: whatever the frontend assigns");
  p.AddInt("worker-token-fd", &token.fd,
           "read the pool's worker token from this inherited descriptor, then close it (how "
           "the frontend starts its ranks)");
  std::string log_level = "info";
  p.AddString("log-level", &log_level,
              "least severe log lines written: debug, info, warning or error (the frontend "
              "passes its own)");
  p.AddString("worker-token-file", &token.file,
              "read the pool's worker token from this file (external workers: the file the "
              "frontend's --worker-token-file names)");
  RankFlags rank;
  p.AddInt("rank", &rank.rank,
           "ask for this rank of the pool (default: the lowest one free); give every worker "
           "of a pool its rank, or none");
  p.AddInt("host-index", &rank.host_index,
           "with --ranks-per-host G and --local-rank K: ask for rank host-index × G + K "
           "(a Kubernetes pod's $(LWS_WORKER_INDEX), say)");
  p.AddInt("ranks-per-host", &rank.ranks_per_host,
           "ranks on each host, for --host-index (default 1)");
  p.AddInt("local-rank", &rank.local_rank,
           "this worker's place among its host's ranks (default 0)");
  int64_t threads = 0;
  p.AddInt("threads", &threads,
           "CPU compute threads for this rank's kernels (default 0: the CPUs this process "
           "may run on, divided by --ranks-per-host; the frontend passes its "
           "--cpu-threads-per-rank to the ranks it starts)");
  absl::Status s = ParseFlagsOrExit(p, argc, argv);
  absl::StatusOr<std::string> secret = ReadToken(token);  // first: the fd is closed at once
  if (s.ok()) s = secret.status();
  if (s.ok()) s = CheckFlags(options, connect_timeout_s);
  absl::StatusOr<int> compute_threads = ComputeThreads(threads, rank);
  if (s.ok()) s = compute_threads.status();
  absl::StatusOr<std::optional<int>> requested = RequestedRank(rank);
  if (s.ok()) s = requested.status();
  if (s.ok()) s = InitLogging("tpserve_worker", log_level);
  if (!s.ok()) {
    std::fprintf(stderr, "tpserve_worker: %s\n%s\n", std::string(s.message()).c_str(), p.HelpHint().c_str());
    return 2;
  }
  if (!openblas_note.empty()) spdlog::info("{}", openblas_note);
  options.token = *std::move(secret);
  options.rank = *requested;
  options.connect_timeout = absl::Seconds(connect_timeout_s);
  // One rank per process; its kernels' threads share the host's cores with the others'.
  SetGemmThreads(*compute_threads);
  SetBf16GemmThreads(*compute_threads);
  SetCpuThreads(*compute_threads);
  spdlog::info("compute threads: {} (of {} CPUs this process may run on)", *compute_threads,
               AvailableCpus());
  s = RunWorkerLoop(options);
  if (!s.ok()) {
    spdlog::error("{}", s.ToString());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) { return tpserve::Main(argc, argv); }
