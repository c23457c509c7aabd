// PoolSupervisor: keeps a worker pool and the Engine over it serving, across pool
// generations.
//
// Run() starts generation 0 (the factory's pool, then an engine over it, warmed up) and
// hands the engine to `on_serving`;
// it then watches it. When the pool fails (a rank died, erred or missed a step) the
// supervisor hands null to `on_serving` (not serving) at once: from the pool's report,
// or from the engine's failed step before the engine ends any in-flight request with
// UNAVAILABLE. It then stops the engine, shuts the pool down and either starts the next
// generation (retrying with backoff) or, with exit_on_pool_failure, returns the
// failure. Stop() ends Run() after the same teardown
// and makes it return OK. The first start failing is returned as is: a server that
// never served should not loop.
//
// Threading: Run() on one thread (it blocks); Stop() from any other.
#ifndef TPSERVE_SERVER_POOL_SUPERVISOR_H_
#define TPSERVE_SERVER_POOL_SUPERVISOR_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/engine.h"
#include "server/pool/step_executor.h"
#include "server/tokenizer/tokenizer.h"

namespace tpserve {

// What the supervisor needs of a pool: WorkerPool's failure and shutdown surface.
class SupervisedPool : public StepExecutor {
 public:
  // False once any rank has failed or Shutdown ran.
  virtual bool healthy() const = 0;
  virtual void Shutdown(const std::string& reason) = 0;
};

// Starts pool generation `generation` and returns once every rank is ready. The pool
// calls `lost` (from any thread) the moment it knows it has failed, so that health goes
// NOT_SERVING then rather than at the next poll.
using PoolFactory = std::function<absl::StatusOr<std::unique_ptr<SupervisedPool>>(
    int generation, std::function<void()> lost)>;

struct PoolSupervisorOptions {
  EngineOptions engine;
  bool exit_on_pool_failure = false;
  absl::Duration health_poll = absl::Milliseconds(100);
  absl::Duration restart_backoff = absl::Seconds(1);  // doubles per failed restart
  absl::Duration max_restart_backoff = absl::Seconds(30);
  // Each generation's engine runs Engine::WarmUp with prompts of this many tokens before
  // it serves (0: it serves cold); a warm-up that fails or passes warmup_timeout fails the
  // generation's start.
  int warmup_tokens = 64;
  absl::Duration warmup_timeout = absl::Minutes(10);
};

class PoolSupervisor {
 public:
  // Called with the engine to serve with, or null while there is none.
  using ServingCallback = std::function<void(std::shared_ptr<Engine>)>;

  // `tokenizer` may be null and outlives the supervisor.
  PoolSupervisor(PoolSupervisorOptions options, PoolFactory start_pool,
                 const Tokenizer* tokenizer, ServingCallback on_serving);

  absl::Status Run();
  void Stop();

 private:
  struct Generation {
    std::unique_ptr<SupervisedPool> pool;
    std::shared_ptr<Engine> engine;
  };

  absl::StatusOr<Generation> StartGeneration(int generation);
  // Hands `engine` to on_serving unless it is serving already, or (for an engine) its
  // generation was lost meanwhile; null: not serving, unless it is not already.
  void Announce(std::shared_ptr<Engine> engine);
  // Returns when the generation fails (its status) or Stop() was called (OK).
  absl::Status Watch(const Generation& current);
  void Teardown(Generation& current, const char* reason);
  // Sleeps up to `duration`, or until Stop() or PoolLost(); false when Stop() was called.
  bool SleepUnlessStopped(absl::Duration duration);
  bool stopped() const;

  const PoolSupervisorOptions options_;
  const PoolFactory start_pool_;
  const Tokenizer* const tokenizer_;
  const ServingCallback on_serving_;

  // Generation `generation`'s pool or engine reported its failure: not serving at once
  // (if it is still the current generation), and the watch wakes.
  void PoolLost(int generation);

  // Held while calling on_serving_, so that announcements keep their order.
  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int generation_ ABSL_GUARDED_BY(mu_) = -1;  // the one starting or serving
  bool pool_lost_ ABSL_GUARDED_BY(mu_) = false;  // since the current generation started
  bool serving_ ABSL_GUARDED_BY(mu_) = false;    // what on_serving_ was last told
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_POOL_SUPERVISOR_H_
