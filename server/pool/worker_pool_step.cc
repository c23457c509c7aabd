// The send half of one step: the plan goes to every rank in the same bytes, then the
// caller waits for every rank's answer (rank 0's carries the outputs) within the step
// deadline; a broken stream, a late rank or a failure reported meanwhile fails the pool
// and the step at once.
//
// The writes run on the pool's sender thread, not the caller's: a rank that stops
// reading blocks its stream's write (flow control) until the teardown ends the rank,
// and that must not hold the step past its deadline.
#include <algorithm>
#include <memory>
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

namespace {

// Tokens the ranks compute in `plan`.
int64_t ComputedTokens(const StepPlan& plan) {
  int64_t tokens = 0;
  for (const auto& seq : plan.new_sequences()) tokens += std::max(seq.num_new_tokens(), 0);
  for (const auto& seq : plan.running()) tokens += std::max(seq.num_new_tokens(), 0);
  return tokens;
}

}  // namespace

absl::StatusOr<StepResult> WorkerPool::Impl::RunStep(const StepPlan& plan) {
  auto message = std::make_shared<FrontendMessage>();
  *message->mutable_step_plan() = plan;
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
  // The deadline follows the step's work: a slow but healthy prefill is not a hang.
  step_allowed = options.step_timeout + options.step_timeout_per_token * ComputedTokens(plan);
  results.assign(options.tp, std::nullopt);
  num_results = 0;
  num_delivered = 0;
  outbox = std::move(message);
  auto answered = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return num_results == options.tp || !failure.ok();
  };
  if (!mu.AwaitWithDeadline(absl::Condition(&answered), step_started + step_allowed)) {
    Fail(absl::DeadlineExceededError(LateRanks()));
  }
  // The supervisor tears the ranks down; the caller learns of the failure now, not
  // after the teardown's grace periods (Shutdown() waits for those).
  if (!failure.ok()) {
    return absl::UnavailableError(absl::StrCat("worker pool failed: ", failure.message()));
  }
  last_step = plan.step();
  awaited_step = 0;
  step_started = absl::InfiniteFuture();
  return *std::move(results[0]);
}

std::string WorkerPool::Impl::LateRanks() const {
  std::string late;
  for (int r = 0; r < options.tp; ++r) {
    if (!results[r]) absl::StrAppend(&late, late.empty() ? "" : ", ", r);
  }
  std::string text = absl::StrCat("rank(s) ", late, " did not answer step ", awaited_step,
                                  " within ", absl::FormatDuration(step_allowed),
                                  " (the step timeout plus its tokens' allowance)");
  if (num_delivered < options.tp) {
    absl::StrAppend(&text, "; the plan reached ", num_delivered, " of ", options.tp,
                    " ranks (rank ", num_delivered, " stopped reading)");
  }
  return text;
}

void WorkerPool::Impl::SendPlans() {
  while (true) {
    std::shared_ptr<const FrontendMessage> plan;
    std::vector<std::shared_ptr<WorkerConnection>> targets;
    {
      absl::MutexLock lock(&mu);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
        return outbox != nullptr || sender_exit;
      };
      mu.Await(absl::Condition(&ready));
      if (sender_exit) return;
      plan = std::move(outbox);
      targets = conns;
    }
    for (const auto& conn : targets) {
      const bool written = conn->Write(*plan);
      absl::MutexLock lock(&mu);
      if (!written) {
        Fail(absl::UnavailableError(absl::StrCat("worker rank ", conn->rank, " (pid ", conn->pid,
                                                 "): stream broken sending step ",
                                                 plan->step_plan().step())));
        break;
      }
      ++num_delivered;
    }
  }
}

}  // namespace tpserve
