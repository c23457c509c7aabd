// WorkerPool's public methods over its Impl, and the options' validation.
#include "server/pool/worker_pool.h"

#include <sys/un.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/status_macros.h"
#include "server/pool/control_address.h"
#include "server/pool/worker_pool_impl.h"
#include "tpserve/v1/batch_limits.h"

namespace tpserve {

using worker::v1::StepPlan;
using worker::v1::StepResult;

absl::Status WorkerPoolOptions::Validate() const {
  auto bad = [](const std::string& what) { return absl::InvalidArgumentError(what); };
  if (model_dir.empty()) return bad("worker pool: model_dir is empty");
  if (tp < 1 || tp > 512) return bad(absl::StrCat("worker pool: tp=", tp, " is outside [1, 512]"));
  if (worker_threads < 1 || worker_threads > 1024) {
    return bad(absl::StrCat("worker pool: worker_threads=", worker_threads,
                            " is outside [1, 1024]"));
  }
  if (device != "cpu" && device != "cuda") {
    return bad(absl::StrCat("worker pool: device \"", device, "\": expected cpu or cuda"));
  }
  if (!kv_cache_dtype.empty() && kv_cache_dtype != "float32" && kv_cache_dtype != "bfloat16") {
    return bad(absl::StrCat("worker pool: kv_cache_dtype \"", kv_cache_dtype,
                            "\": expected float32 or bfloat16"));
  }
  if (device != "cpu" && !kv_cache_dtype.empty() && kv_cache_dtype != dtype) {
    return bad(absl::StrCat("worker pool: the cuda KV cache holds the compute dtype (", dtype,
                            "), not ", kv_cache_dtype));
  }
  if (!quantization.empty() && quantization != "int8") {
    return bad(absl::StrCat("worker pool: quantization \"", quantization,
                            "\": expected empty or int8"));
  }
  if (quantization == "int8" && (device != "cpu" || dtype != "bfloat16")) {
    return bad(absl::StrCat("worker pool: int8 quantization needs device cpu and dtype "
                            "bfloat16, not ", device, " and ", dtype));
  }
  if (dtype != "float32" && dtype != "bfloat16") {
    return bad(absl::StrCat("worker pool: dtype \"", dtype, "\" is not supported on ", device));
  }
  if (spawn_workers && worker_binary.empty()) return bad("worker pool: worker_binary is empty");
  if (control_address.empty()) return bad("worker pool: control_address is empty");
  if (std::optional<std::string> path = UnixSocketPath(control_address)) {
    if (path->empty() || path->size() >= sizeof(sockaddr_un::sun_path)) {
      return bad(absl::StrCat("worker pool: control_address \"", control_address,
                              "\": a Unix socket path must have 1 to ",
                              sizeof(sockaddr_un::sun_path) - 1, " characters"));
    }
  } else {
    const size_t colon = control_address.rfind(':');
    int port = -1;
    if (colon == std::string::npos ||
        !absl::SimpleAtoi(control_address.substr(colon + 1), &port) || port < 0 || port > 65535) {
      return bad(absl::StrCat("worker pool: control_address \"", control_address,
                              "\" is neither unix:PATH nor HOST:PORT"));
    }
    if (port == 0 && !spawn_workers) {
      return bad("worker pool: external workers need a fixed control port, not 0");
    }
  }
  if (!advertise_host.empty()) {
    const bool name_chars = advertise_host.size() <= 253 &&
        std::all_of(advertise_host.begin(), advertise_host.end(), [](char c) {
          return absl::ascii_isalnum(c) || c == '.' || c == '-' || c == ':';
        });
    const bool has_port = std::count(advertise_host.begin(), advertise_host.end(), ':') == 1;
    if (!name_chars || has_port || advertise_host == "0.0.0.0" || advertise_host == "::") {
      return bad(absl::StrCat("worker pool: advertise_host (--advertise-address) \"",
                              advertise_host.substr(0, 64),
                              "\" must be one host name or address (letters, digits, '.', "
                              "'-', ':'; at most 253; not a wildcard; no port)"));
    }
    if (UnixSocketPath(control_address)) {
      return bad("worker pool: advertise_host (--advertise-address) is for ranks on other "
                 "hosts: give a HOST:PORT --control-address");
    }
  }
  if (kv_block_size < 1) return bad("worker pool: kv_block_size must be ≥ 1");
  if (kv_num_blocks < 0) return bad("worker pool: kv_num_blocks must be ≥ 0");
  const bool by_fraction = device == "cuda" && kv_memory_fraction > 0 && kv_memory_fraction <= 1;
  if (kv_num_blocks == 0 && kv_memory_bytes <= 0 && !by_fraction) {
    return bad("worker pool: set kv_num_blocks, a positive kv_memory_bytes or (cuda) a "
               "kv_memory_fraction in (0, 1]");
  }
  TPSERVE_RETURN_IF_ERROR(ValidateBatchLimits(limits, "worker pool: limits"));
  if (generation < 0) return bad("worker pool: generation must be ≥ 0");
  if (start_timeout <= absl::ZeroDuration() || step_timeout <= absl::ZeroDuration() ||
      comm_timeout < absl::ZeroDuration() || stop_grace < absl::ZeroDuration() ||
      step_timeout_per_token < absl::ZeroDuration()) {
    return bad("worker pool: timeouts must be positive");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<WorkerPool>> WorkerPool::Start(const WorkerPoolOptions& options) {
  TPSERVE_RETURN_IF_ERROR(options.Validate());
  auto impl = std::make_unique<Impl>(options);
  absl::Status s = impl->Begin();
  if (s.ok()) s = impl->AwaitReady();
  if (!s.ok()) {
    impl->Stop(absl::StrCat("start failed: ", s.message()));
    return s;
  }
  return std::unique_ptr<WorkerPool>(new WorkerPool(std::move(impl)));
}

WorkerPool::WorkerPool(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
WorkerPool::~WorkerPool() { Shutdown("the pool was destroyed"); }

absl::StatusOr<StepResult> WorkerPool::RunStep(const StepPlan& plan) { return impl_->RunStep(plan); }

int WorkerPool::num_kv_blocks() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->num_kv_blocks;
}

int WorkerPool::kv_block_size() const { return impl_->options.kv_block_size; }

bool WorkerPool::healthy() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->phase == PoolPhase::kServing && impl_->failure.ok() && !impl_->stop_requested;
}

absl::Status WorkerPool::failure() const {
  absl::MutexLock lock(&impl_->mu);
  if (!impl_->failure.ok()) return impl_->failure;
  if (impl_->stop_requested) return absl::UnavailableError(impl_->stop_reason);
  return absl::OkStatus();
}

std::vector<int64_t> WorkerPool::worker_pids() const {
  return std::vector<int64_t>(impl_->pids.begin(), impl_->pids.end());
}

void WorkerPool::Shutdown(const std::string& reason) { impl_->Stop(reason); }

}  // namespace tpserve
