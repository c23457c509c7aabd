#include "server/engine_loop.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "spdlog/spdlog.h"
#include "server/step_result_check.h"

namespace tpserve {

absl::Status Engine::Impl::Validate(const EngineRequest& request) const {
  const int64_t prompt = static_cast<int64_t>(request.prompt_ids.size());
  if (prompt == 0) return absl::InvalidArgumentError("prompt_ids must not be empty");
  if (request.max_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_tokens must be ≥ 1, got ", request.max_tokens));
  }
  const int64_t total = prompt + request.max_tokens;
  const int max_context = options.limits.max_context();
  if (max_context > 0 && total > max_context) {
    return absl::InvalidArgumentError(absl::StrCat("prompt (", prompt, ") + max_tokens (",
                                                   request.max_tokens, ") exceeds max_context ",
                                                   max_context));
  }
  // A sequence alone in the cache must fit, or it could never finish.
  const int64_t capacity = CapacityTokens();
  if (total > capacity) {
    return absl::InvalidArgumentError(absl::StrCat("prompt (", prompt, ") + max_tokens (",
                                                   request.max_tokens,
                                                   ") exceeds the KV cache (", capacity,
                                                   " tokens)"));
  }
  return absl::OkStatus();
}

void Engine::Impl::Loop() {
  while (Intake()) {
    EndExpired();
    PublishStats();
    ScheduledStep step = scheduler.Schedule();
    if (step.batch.empty()) {
      absl::Time deadline = absl::InfiniteFuture();
      for (const auto& [id, request] : live) {
        deadline = std::min(deadline, request.seq->request().deadline);
      }
      // With work left but nothing schedulable (not expected), retry shortly.
      if (scheduler.HasWork()) deadline = std::min(deadline, absl::Now() + absl::Milliseconds(10));
      WaitForInput(deadline);
      continue;
    }
    if (absl::Status status = RunStep(step); !status.ok()) {
      // Health first: every UNAVAILABLE a client sees from here on (a refused Submit
      // too) comes after it.
      if (options.on_failure) options.on_failure(status);
      {
        absl::MutexLock lock(&mu);
        is_healthy = false;
      }
      FailAll(status);
      return;
    }
  }
  FailAll(absl::UnavailableError("engine stopped"));
}

bool Engine::Impl::Intake() {
  std::vector<std::pair<uint64_t, Request>> incoming;
  std::vector<uint64_t> aborted;
  bool cancel = false;
  {
    absl::MutexLock lock(&mu);
    if (stopping) return false;
    incoming.swap(submitted);
    aborted.swap(aborts);
    cancel = std::exchange(cancel_all, false);
    if (resets_asked != resets_done) {
      resets_dropped = blocks.ResetPrefixCache();
      resets_done = resets_asked;
      stats.kv_blocks_cached = blocks.num_cached_blocks();  // as the caller returns
    }
    if (std::exchange(forget_step_costs, false)) {
      token_budget = StepTokenBudget(options.step_time_target, options.limits.max_batch_tokens());
      scheduler.set_token_budget(token_budget.tokens());
    }
  }
  for (auto& [id, request] : incoming) {
    scheduler.Add(request.seq.get());
    live.emplace(id, std::move(request));
  }
  for (uint64_t id : aborted) End(id, absl::CancelledError("request aborted"));
  if (cancel) CancelLive();
  return true;
}

void Engine::Impl::CancelLive() {
  std::vector<uint64_t> ids;
  for (const auto& [id, request] : live) ids.push_back(id);
  for (uint64_t id : ids) {
    if (absl::Status s = live.at(id).seq->Finish(FinishReason::kCancelled); !s.ok()) {
      End(id, absl::InternalError(absl::StrCat("sequence ", id, ": ", s.ToString())));
      continue;
    }
    Complete(id);
  }
}

void Engine::Impl::EndExpired() {
  const absl::Time now = absl::Now();
  std::vector<uint64_t> expired;
  for (const auto& [id, request] : live) {
    if (request.seq->request().deadline <= now) expired.push_back(id);
  }
  for (uint64_t id : expired) End(id, absl::DeadlineExceededError("request deadline passed"));
}

void Engine::Impl::WaitForInput(absl::Time deadline) {
  absl::MutexLock lock(&mu);
  mu.AwaitWithDeadline(absl::Condition(this, &Impl::HasInput), deadline);
}

absl::Status Engine::Impl::RunStep(const ScheduledStep& step) {
  const absl::Time start = absl::Now();
  for (const ScheduledSequence& s : step.batch) s.seq->MarkScheduled(start);
  absl::StatusOr<worker::v1::StepResult> result = executor.RunStep(step.plan);
  const absl::Duration elapsed = absl::Now() - start;
  if (!result.ok()) {
    return absl::UnavailableError(absl::StrCat("step ", step.plan.step(),
                                               " failed: ", result.status().ToString()));
  }
  if (result->step() != step.plan.step()) {
    return absl::UnavailableError(absl::StrCat("executor answered step ", result->step(),
                                               " to plan ", step.plan.step()));
  }
  scheduler.CompleteStep(step);
  RecordStep(elapsed, result->compute_time_us());
  int64_t tokens = 0, prefilling = 0;  // sequences that computed more than one token
  for (const ScheduledSequence& s : step.batch) {
    tokens += s.num_new_tokens;
    prefilling += s.num_new_tokens > 1;
  }
  // The scheduler's choices, step by step (--log-level debug).
  spdlog::debug("engine step {}: {} sequences ({} prefilling), {} tokens, {:.1f} ms",
                step.plan.step(), step.batch.size(), prefilling, tokens,
                absl::ToDoubleMilliseconds(elapsed));
  token_budget.Observe(tokens, elapsed, prefilling > 0);
  scheduler.set_token_budget(token_budget.tokens());
  if (options.staggered_admission && token_budget.modelled()) {
    scheduler.set_step_cost(token_budget.fixed(), token_budget.per_token());
  }
  TPSERVE_RETURN_IF_ERROR(ApplyOutputs(step, *result));
  PublishStats();
  return absl::OkStatus();
}

absl::Status Engine::Impl::ApplyOutputs(const ScheduledStep& step,
                                        const worker::v1::StepResult& result) {
  // Checked whole before acting on it: an answer that breaks the protocol fails the
  // step (the pool) and never reaches a request.
  TPSERVE_RETURN_IF_ERROR(CheckStepResult(step, result, options.vocab_size));
  absl::flat_hash_map<uint64_t, const ScheduledSequence*> scheduled;
  for (const ScheduledSequence& s : step.batch) scheduled[s.seq->id()] = &s;
  for (const worker::v1::SequenceOutput& output : result.sequences()) {
    const ScheduledSequence& s = *scheduled[output.seq_id()];
    if (output.has_error()) {  // its own failure: it ends alone, its KV freed
      End(s.seq->id(), absl::Status(static_cast<absl::StatusCode>(output.error().code()),
                                    absl::StrCat("sequence ", s.seq->id(), ": ",
                                                 output.error().message())));
      continue;
    }
    s.seq->AddPromptLogprobs(s.first_position, output.prompt_logprobs());
    if (output.has_token_id()) AppendToken(s.seq, output);
  }
  return absl::OkStatus();
}

void Engine::Impl::AppendToken(Sequence* seq, const worker::v1::SequenceOutput& output) {
  const uint64_t id = seq->id();
  absl::StatusOr<std::optional<FinishReason>> finish =
      seq->AppendToken(output.token_id(), output.logprobs());
  absl::Status status = finish.status();
  if (status.ok() && finish->has_value()) status = seq->Finish(**finish);
  if (!status.ok()) {
    End(id, absl::InternalError(absl::StrCat("sequence ", id, ": ", status.ToString())));
    return;
  }
  if (!seq->finish_reason().has_value()) {
    live.at(id).on_chunk(seq->TakeChunk());
    return;
  }
  Complete(id);
}

void Engine::Impl::Complete(uint64_t id) {
  Request& request = live.at(id);
  scheduler.Remove(request.seq.get());
  PublishStats();
  request.on_chunk(request.seq->TakeChunk());
  request.on_done(absl::OkStatus());
  live.erase(id);
}

void Engine::Impl::End(uint64_t id, absl::Status status) {
  auto it = live.find(id);
  if (it == live.end()) return;  // already ended
  Request request = std::move(it->second);
  live.erase(it);
  scheduler.Remove(request.seq.get());
  PublishStats();
  request.on_done(std::move(status));
}

void Engine::Impl::FailAll(const absl::Status& status) {
  std::vector<std::pair<uint64_t, Request>> pending;
  {
    absl::MutexLock lock(&mu);
    pending.swap(submitted);
    aborts.clear();
  }
  for (auto& [id, request] : live) scheduler.Remove(request.seq.get());
  for (auto& entry : live) pending.emplace_back(entry.first, std::move(entry.second));
  live.clear();
  PublishStats();
  for (auto& [id, request] : pending) request.on_done(status);
}

void Engine::Impl::PublishStats() {
  absl::MutexLock lock(&mu);
  stats.kv_blocks_in_use = blocks.num_used_blocks();
  stats.running = scheduler.num_running();
  stats.preemptions = scheduler.num_preemptions();
  stats.prefix_cache_queried_tokens = scheduler.prefix_cache_stats().queried_tokens;
  stats.prefix_cache_hit_tokens = scheduler.prefix_cache_stats().hit_tokens;
  stats.kv_blocks_cached = blocks.num_cached_blocks();
  stats.waiting = scheduler.num_waiting();
}

void Engine::Impl::RecordStep(absl::Duration step_time, int64_t compute_us) {
  absl::MutexLock lock(&mu);
  ++stats.steps;
  stats.step_wall_us += absl::ToInt64Microseconds(step_time);
  stats.worker_compute_us += compute_us;
}

}  // namespace tpserve
