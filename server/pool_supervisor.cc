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
    Announce(current->engine);
    const absl::Status lost = Watch(*current);
    Announce(nullptr);
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
    generation_ = generation;
    pool_lost_ = false;
  }
  TPSERVE_ASSIGN_OR_RETURN(current.pool,
                           start_pool_(generation, [this, generation] { PoolLost(generation); }));
  EngineOptions engine_options = options_.engine;
  engine_options.on_failure = [this, generation](const absl::Status&) { PoolLost(generation); };
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      Engine::Create(engine_options, current.pool.get(), tokenizer_);
  if (!engine.ok()) {
    current.pool->Shutdown("engine failed to start");
    return engine.status();
  }
  current.engine = std::move(*engine);
  current.engine->Start();
  if (options_.warmup_tokens > 0) {
    absl::StatusOr<WarmupTimes> warm = current.engine->WarmUp(
        options_.warmup_tokens, absl::Now() + options_.warmup_timeout);
    if (!warm.ok()) {
      current.engine->Stop();
      current.pool->Shutdown("warm-up failed");
      return absl::Status(warm.status().code(),
                          absl::StrCat("warm-up: ", warm.status().message()));
    }
    if (!warm->failed_alone.ok()) {
      spdlog::warn("worker pool generation {}: a warm-up request failed alone ({}); serving",
                   generation, warm->failed_alone.ToString());
    } else if (warm->prompt_tokens > 0) {
      spdlog::info(
          "worker pool generation {} warmed up: a {}-token prefill took {:.1f} ms cold, then "
          "{:.1f} ms; a decode step {:.1f} ms",
          generation, warm->prompt_tokens, absl::ToDoubleMilliseconds(warm->cold_prefill),
          absl::ToDoubleMilliseconds(warm->prefill), absl::ToDoubleMilliseconds(warm->decode));
    }
  }
  return current;
}

void PoolSupervisor::Announce(std::shared_ptr<Engine> engine) {
  absl::MutexLock lock(&mu_);
  const bool serving = engine != nullptr;
  if (serving == serving_ || (serving && pool_lost_)) return;
  serving_ = serving;
  on_serving_(std::move(engine));
}

absl::Status PoolSupervisor::Watch(const Generation& current) {
  while (SleepUnlessStopped(options_.health_poll)) {
    bool reported;
    {
      absl::MutexLock lock(&mu_);
      reported = pool_lost_;
    }
    if (reported || !current.engine->healthy() || !current.pool->healthy()) {
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

void PoolSupervisor::PoolLost(int generation) {
  absl::MutexLock lock(&mu_);
  if (generation != generation_) return;  // a past generation's late report
  pool_lost_ = true;
  if (serving_) {
    serving_ = false;
    on_serving_(nullptr);
  }
}

bool PoolSupervisor::SleepUnlessStopped(absl::Duration duration) {
  absl::MutexLock lock(&mu_);
  auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || pool_lost_; };
  mu_.AwaitWithTimeout(absl::Condition(&woken), duration);
  return !stop_;
}

}  // namespace tpserve
