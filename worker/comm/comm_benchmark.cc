// comm_benchmark: latency of the collectives between CPU rank processes on this machine,
// for the sizes a decode step uses (one hidden row) and larger ones: Gloo's ring
// all-reduce, tpserve's all-reduce (an all-gather plus a local sum for small payloads)
// and the all-gather, each over Gloo's TCP transport and over shared memory (ranks on
// one host, GlooOptions::shared_memory); at --tp 4 or more also tpserve's all-reduce
// with the ranks standing on two hosts (shared memory within each, TCP between).
//
//   bazel run //worker/comm:comm_benchmark -- [--tp 2] [--iters 500]
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/args.h"
#include "base/status_macros.h"
#include "base/subprocess.h"
#include "worker/comm/gloo_comm_group.h"
#include "worker/comm/rank_launcher.h"

namespace tpserve {
namespace {

// Times `op` over `n` iterations after a barrier; microseconds per call.
absl::StatusOr<double> Time(CommGroup& comm, int n, const std::function<absl::Status()>& op) {
  TPSERVE_RETURN_IF_ERROR(comm.Barrier());
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    TPSERVE_RETURN_IF_ERROR(op());
  }
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
             .count() / n;
}

// Four groups over the same ranks: Gloo's ring, tpserve's default over TCP only,
// tpserve's default (shared memory on one host), and tpserve's default with the ranks
// standing on two hosts (the lower half on one, GlooOptions::host_id: shared memory
// within each, TCP, here loopback, between them; tp 4 or more). Rounds alternate
// between the measurements so that all see the same machine noise.
absl::Status RunRank(int rank, int tp, int port, int iters) {
  const int num_groups = tp >= 4 ? 4 : 3;
  std::unique_ptr<GlooCommGroup> groups[4];
  for (int g = 0; g < num_groups; ++g) {
    GlooOptions options;
    options.rank = rank;
    options.size = tp;
    options.store_port = port;
    options.prefix = g == 0 ? "ring" : g == 1 ? "tcp" : g == 2 ? "shm" : "hosts";
    if (g == 0) options.gather_reduce_max_floats = 0;
    options.shared_memory = g >= 2;
    if (g == 3) options.host_id = rank < tp / 2 ? "host a" : "host b";
    TPSERVE_ASSIGN_OR_RETURN(std::unique_ptr<GlooCommGroup> comm, GlooCommGroup::Create(options));
    if (comm->uses_shared_memory() != (g >= 2)) {
      return absl::FailedPreconditionError("shared memory is not what was asked");
    }
    groups[g] = std::move(comm);
  }
  if (rank == 0) {
    std::printf("%8s %14s %14s %14s %10s %14s %14s %10s %14s\n", "floats", "ring AR us",
                "tcp AR us", "shm AR us", "AR tcp/shm", "tcp AG us", "shm AG us", "AG tcp/shm",
                "2-host AR us");
  }
  for (int64_t floats : {768, 4096, 65536, 1 << 18, 1 << 20, 1 << 22}) {
    std::vector<float> data(floats, 1.0f), gathered(floats * tp);
    const int n = floats >= (1 << 22) ? iters / 200 + 1
                  : floats >= (1 << 18) ? iters / 50 + 1
                                        : iters / 10 + 1;
    // ring all-reduce; all-reduce over tcp, shm; all-gather over tcp, shm; all-reduce
    // over two hosts.
    double us[6] = {0, 0, 0, 0, 0, 0};
    for (int round = 0; round < 10; ++round) {
      for (int k = 0; k < (num_groups == 4 ? 6 : 5); ++k) {
        CommGroup& comm = *groups[k == 0 ? 0 : k == 1 || k == 3 ? 1 : k == 5 ? 3 : 2];
        TPSERVE_ASSIGN_OR_RETURN(double t, Time(comm, n, [&] {
          return k < 3 || k == 5 ? comm.AllReduceSum(absl::MakeSpan(data))
                                 : comm.AllGather(data, absl::MakeSpan(gathered));
        }));
        us[k] += t / 10;
      }
    }
    if (rank == 0) {
      char hosts[32] = "-";
      if (num_groups == 4) std::snprintf(hosts, sizeof(hosts), "%.1f", us[5]);
      std::printf("%8lld %14.1f %14.1f %14.1f %9.2fx %14.1f %14.1f %9.2fx %14s\n",
                  static_cast<long long>(floats), us[0], us[1], us[2], us[1] / us[2], us[3], us[4],
                  us[3] / us[4], hosts);
    }
  }
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  int64_t tp = 2, iters = 500, rank = -1, port = 0;
  ArgParser p("comm_benchmark");
  p.AddInt("tp", &tp, "ranks (default 2)");
  p.AddInt("iters", &iters, "iterations per small size (default 500)");
  p.AddInt("rank", &rank, "internal");
  p.AddInt("store-port", &port, "internal");
  if (absl::Status s = ParseFlagsOrExit(p, argc, argv); !s.ok()) {
    std::fprintf(stderr, "%s\n%s\n", std::string(s.message()).c_str(), p.HelpHint().c_str());
    return 2;
  }
  if (rank >= 0) {
    absl::Status s = RunRank(static_cast<int>(rank), static_cast<int>(tp), static_cast<int>(port),
                             static_cast<int>(iters));
    if (!s.ok()) std::fprintf(stderr, "rank %lld: %s\n", static_cast<long long>(rank),
                              std::string(s.message()).c_str());
    return s.ok() ? 0 : 1;
  }
  auto self = SelfExecutable();
  if (!self.ok()) return 1;
  absl::Status s = RunLocalRanks(static_cast<int>(tp), [&](int r, int store_port) {
    return std::vector<std::string>{*self, "--rank", std::to_string(r), "--tp", std::to_string(tp),
                                    "--store-port", std::to_string(store_port), "--iters",
                                    std::to_string(iters)};
  });
  if (!s.ok()) std::fprintf(stderr, "comm_benchmark: %s\n", std::string(s.message()).c_str());
  return s.ok() ? 0 : 1;
}

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) { return tpserve::Main(argc, argv); }
