// The send half of one step: the plan goes to every rank in the same bytes, then the
// caller waits for every rank's answer (rank 0's carries the outputs) within the step
// deadline; a broken stream, a late rank or a failure reported meanwhile fails the pool.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/pool/worker_pool_impl.h"

namespace tpserve {

using worker::v1::FrontendMessage;
using worker::v1::StepPlan;
using worker::v1::StepResult;

absl::StatusOr<StepResult> WorkerPool::Impl::RunStep(const StepPlan& plan) {
  std::vector<std::shared_ptr<WorkerConnection>> targets;
  {
    absl::MutexLock lock(&mu);
    if (!failure.ok() || phase != PoolPhase::kServing) {
      return absl::UnavailableError(absl::StrCat(
          "worker pool is down: ", failure.ok() ? stop_reason : failure.message()));
    }
    if (plan.step() != last_step + 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("step ", plan.step(), " does not follow step ", last_step));
    }
    awaited_step = plan.step();
    step_started = absl::Now();
    results.assign(options.tp, std::nullopt);
    num_results = 0;
    targets = conns;
  }
  FrontendMessage message;
  *message.mutable_step_plan() = plan;
  for (const auto& conn : targets) {
    if (conn->Write(message)) continue;
    absl::MutexLock lock(&mu);
    Fail(absl::UnavailableError(absl::StrCat("worker rank ", conn->rank, " (pid ", conn->pid,
                                             "): stream broken sending step ", plan.step())));
    break;
  }
  absl::MutexLock lock(&mu);
  auto answered = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return num_results == options.tp || !failure.ok();
  };
  if (!mu.AwaitWithDeadline(absl::Condition(&answered), step_started + options.step_timeout)) {
    std::string late;
    for (int r = 0; r < options.tp; ++r) {
      if (!results[r]) absl::StrAppend(&late, late.empty() ? "" : ", ", r);
    }
    Fail(absl::DeadlineExceededError(absl::StrCat("rank(s) ", late, " did not answer step ",
                                                  plan.step(), " within ",
                                                  absl::FormatDuration(options.step_timeout))));
  }
  if (!failure.ok()) {
    mu.Await(absl::Condition(&torn_down));
    return absl::UnavailableError(absl::StrCat("worker pool failed: ", failure.message()));
  }
  last_step = plan.step();
  awaited_step = 0;
  step_started = absl::InfiniteFuture();
  return *std::move(results[0]);
}

}  // namespace tpserve
