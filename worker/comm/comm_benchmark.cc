// comm_benchmark: latency of the Gloo collectives between CPU rank processes on this
// machine, for the sizes a decode step uses (one hidden row) and larger ones: Gloo's
// ring all-reduce beside tpserve's default, and the all-gather.
//
//   bazel run //worker/comm:comm_benchmark -- [--tp 2] [--iters 500]
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/args.h"
#include "base/subprocess.h"
#include "worker/comm/gloo_comm_group.h"
#include "worker/comm/rank_launcher.h"

namespace tpserve {
namespace {

// Times `op` over `n` iterations after a barrier; microseconds per call.
absl::StatusOr<double> Time(CommGroup& comm, int n, const std::function<absl::Status()>& op) {
  if (absl::Status s = comm.Barrier(); !s.ok()) return s;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    if (absl::Status s = op(); !s.ok()) return s;
  }
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
             .count() / n;
}

// Two groups over the same ranks: Gloo's ring all-reduce, and tpserve's default (an
// all-gather plus a local sum for small payloads). Rounds alternate between them so
// that both see the same machine noise.
absl::Status RunRank(int rank, int tp, int port, int iters) {
  std::unique_ptr<GlooCommGroup> groups[2];
  for (int g = 0; g < 2; ++g) {
    GlooOptions options;
    options.rank = rank;
    options.size = tp;
    options.store_port = port;
    options.prefix = g == 0 ? "ring" : "default";
    if (g == 0) options.gather_reduce_max_floats = 0;
    auto comm = GlooCommGroup::Create(options);
    if (!comm.ok()) return comm.status();
    groups[g] = *std::move(comm);
  }
  for (int64_t floats : {768, 4096, 65536, 1 << 20}) {
    std::vector<float> data(floats, 1.0f), gathered(floats * tp);
    const int n = floats >= (1 << 20) ? iters / 50 + 1 : iters / 10 + 1;
    double us[3] = {0, 0, 0};  // ring all-reduce, default all-reduce, all-gather
    for (int round = 0; round < 10; ++round) {
      for (int k = 0; k < 3; ++k) {
        CommGroup& comm = *groups[k == 0 ? 0 : 1];
        auto t = Time(comm, n, [&] {
          return k < 2 ? comm.AllReduceSum(absl::MakeSpan(data))
                       : comm.AllGather(data, absl::MakeSpan(gathered));
        });
        if (!t.ok()) return t.status();
        us[k] += *t / 10;
      }
    }
    if (rank == 0) {
      std::printf("tp=%d %8lld floats: all-reduce ring %9.1f us, default %9.1f us (%.2fx); "
                  "all-gather %9.1f us\n",
                  tp, static_cast<long long>(floats), us[0], us[1], us[0] / us[1], us[2]);
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
  if (absl::Status s = p.Parse(argc, argv); !s.ok()) {
    std::fprintf(stderr, "%s\n%s", std::string(s.message()).c_str(), p.Usage().c_str());
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
