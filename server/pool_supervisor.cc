#include "server/pool_supervisor.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "spdlog/spdlog.h"

namespace tpserve {

PoolSupervisor::PoolSupervisor(PoolSupervisorOptions options, PoolFactory start_pool,
                               const Tokenizer* tokenizer, ServingCallback on_serving)
    : options_(std::move(options)),
      start_pool_(std::move(start_pool)),
      tokenizer_(tokenizer),
      on_serving_(std::move(on_serving)) {}

absl::Status PoolSupervisor::Run() {
  absl::Duration backoff = options_.restart_backoff;
  for (int generation = 0; !stopped(); ++generation) {
    absl::StatusOr<Generation> current = StartGeneration(generation);
    if (!current.ok()) {
      if (generation == 0 || options_.exit_on_pool_failure) return current.status();
      spdlog::error("worker pool generation {} failed to start: {}; retrying in {}", generation,
                    current.status().ToString(), absl::FormatDuration(backoff));
      if (!SleepUnlessStopped(backoff)) break;
      backoff = std::min(backoff * 2, options_.max_restart_backoff);
      continue;
    }
    backoff = options_.restart_backoff;
    spdlog::info("worker pool generation {} ready", generation);
    on_serving_(current->engine);
    const absl::Status lost = Watch(*current);
    on_serving_(nullptr);
    Teardown(*current, lost.ok() ? "server shutting down" : "pool failed");
    if (lost.ok()) break;
    if (options_.exit_on_pool_failure) {
      spdlog::error("worker pool generation {} lost: {}; exiting (--exit-on-pool-failure)",
                    generation, lost.ToString());
      return lost;
    }
    spdlog::error("worker pool generation {} lost: {}; rebuilding the pool", generation,
                  lost.ToString());
  }
  return absl::OkStatus();
}

void PoolSupervisor::Stop() {
  absl::MutexLock lock(&mu_);
  stop_ = true;
}

bool PoolSupervisor::stopped() const {
  absl::MutexLock lock(&mu_);
  return stop_;
}

absl::StatusOr<PoolSupervisor::Generation> PoolSupervisor::StartGeneration(int generation) {
  Generation current;
  {
    absl::MutexLock lock(&mu_);
    pool_lost_ = false;
  }
  TPSERVE_ASSIGN_OR_RETURN(current.pool, start_pool_(generation, [this] { PoolLost(); }));
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      Engine::Create(options_.engine, current.pool.get(), tokenizer_);
  if (!engine.ok()) {
    current.pool->Shutdown("engine failed to start");
    return engine.status();
  }
  current.engine = std::move(*engine);
  current.engine->Start();
  return current;
}

absl::Status PoolSupervisor::Watch(const Generation& current) {
  while (SleepUnlessStopped(options_.health_poll)) {
    if (!current.engine->healthy() || !current.pool->healthy()) {
      return absl::UnavailableError("a worker rank failed or the pool shut down");
    }
  }
  return absl::OkStatus();
}

void PoolSupervisor::Teardown(Generation& current, const char* reason) {
  // Requests still running (only after a failure or past the drain grace) end with
  // UNAVAILABLE; handlers hold their own reference to the engine.
  current.engine->Stop();
  current.pool->Shutdown(reason);
  current.engine.reset();
  current.pool.reset();
}

void PoolSupervisor::PoolLost() {
  absl::MutexLock lock(&mu_);
  pool_lost_ = true;
}

bool PoolSupervisor::SleepUnlessStopped(absl::Duration duration) {
  absl::MutexLock lock(&mu_);
  auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || pool_lost_; };
  mu_.AwaitWithTimeout(absl::Condition(&woken), duration);
  return !stop_;
}

}  // namespace tpserve
