// PrepareServing: turns a validated ServerConfig into what the tpserve binary runs —
// the model's description for the service, its tokenizer (null when the model
// directory has no tokenizer.json: token ids only) and the supervisor's pool and
// engine options. Reads config.json and tokenizer.json; errors name the file.
// Called once, from main.
#ifndef TPSERVE_SERVER_SERVING_SETUP_H_
#define TPSERVE_SERVER_SERVING_SETUP_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/pool/worker_pool.h"
#include "server/pool_supervisor.h"
#include "server/server_config.h"
#include "server/serving_core.h"
#include "server/tokenizer/tokenizer.h"

namespace tpserve {

struct ServingSetup {
  ServedModel model;
  std::unique_ptr<Tokenizer> tokenizer;
  WorkerPoolOptions pool;  // generation set per start
  PoolSupervisorOptions supervisor;
  // The temporary folder of the default control socket (null with --control-address):
  // removed, with its contents, when the last copy of this goes.
  std::shared_ptr<const std::string> control_dir;
};

absl::StatusOr<ServingSetup> PrepareServing(const ServerConfig& config);

// Starts WorkerPools with `options` and the generation asked for.
PoolFactory WorkerPoolFactory(WorkerPoolOptions options);

// The worker binary that serves `device`: tpserve_worker for "cpu" (it links no CUDA
// library), tpserve_worker_cuda for "cuda".
std::string WorkerBinaryName(const std::string& device);
// That binary installed beside the program at `self` (an image's /usr/local/bin), else
// built beside it (bazel-bin: <dir of self>/../worker/rank/); NOT_FOUND naming both.
absl::StatusOr<std::string> WorkerBinaryBeside(const std::string& self, const std::string& device);
// WorkerBinaryBeside this process's binary (/proc/self/exe).
absl::StatusOr<std::string> DefaultWorkerBinary(const std::string& device);

}  // namespace tpserve

#endif  // TPSERVE_SERVER_SERVING_SETUP_H_
