// tpserve_worker: one tensor-parallel rank. Dials the frontend's WorkerControl service,
// gets its rank, model and rendezvous from it, and runs StepPlans until Shutdown.
//
//   tpserve_worker --frontend unix:/run/tpserve/control.sock
//   tpserve_worker --frontend 10.0.0.5:7000 [--device cuda:3]
//
// Exit status: 0 after Shutdown, 1 on an error (reported to the frontend first),
// 2 on bad flags, 3 when the frontend's stream ends without a Shutdown.
#include <cstdio>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/args.h"
#include "worker/kernels/cpu/gemm.h"
#include "worker/rank/worker_loop.h"

namespace tpserve {
namespace {

int Main(int argc, char** argv) {
  WorkerLoopOptions options;
  int64_t connect_timeout_s = 30;
  ArgParser p("tpserve_worker");
  p.AddString("frontend", &options.frontend, "the frontend's control address: unix:/path or host:port");
  p.AddInt("connect-timeout-s", &connect_timeout_s, "how long to try reaching the frontend (default 30)");
  p.AddString("device", &options.device,
              "cpu, cuda (the GPU the frontend assigns) or cuda:N (this host's GPU N); "
              "default: whatever the frontend assigns");
  absl::Status s = p.Parse(argc, argv);
  if (s.ok() && !options.device.empty() && options.device != "cpu" && options.device != "cuda") {
    int ordinal = -1;
    if (!absl::StartsWith(options.device, "cuda:") ||
        !absl::SimpleAtoi(options.device.substr(5), &ordinal) || ordinal < 0) {
      s = absl::InvalidArgumentError("--device must be cpu, cuda or cuda:N");
    }
  }
  if (s.ok() && options.frontend.empty()) s = absl::InvalidArgumentError("--frontend is required");
  if (s.ok() && connect_timeout_s < 1) s = absl::InvalidArgumentError("--connect-timeout-s must be ≥ 1");
  if (s.ok() && !p.positional().empty()) {
    s = absl::InvalidArgumentError(absl::StrCat("unexpected argument \"", p.positional()[0], "\""));
  }
  if (!s.ok()) {
    std::fprintf(stderr, "tpserve_worker: %s\n%s", std::string(s.message()).c_str(), p.Usage().c_str());
    return 2;
  }
  options.connect_timeout = absl::Seconds(connect_timeout_s);
  SetGemmThreads(1);  // one rank per process; ranks share the host's cores
  s = RunWorkerLoop(options);
  if (!s.ok()) {
    std::fprintf(stderr, "tpserve_worker: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) { return tpserve::Main(argc, argv); }
