#include "server/engine.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/status_macros.h"
#include "server/engine_loop.h"
#include "tpserve/v1/batch_limits.h"

namespace tpserve {

absl::Status EngineOptions::Validate() const {
  TPSERVE_RETURN_IF_ERROR(ValidateBatchLimits(limits, "engine options: limits"));
  if (max_queue < 1) {
    return absl::InvalidArgumentError(absl::StrCat("max_queue must be ≥ 1, got ", max_queue));
  }
  if (step_time_target < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("step_time_target must be ≥ 0");
  }
  if (kv_watermark_blocks < 0 || vocab_size < 0) {
    return absl::InvalidArgumentError(absl::StrCat("kv_watermark_blocks (", kv_watermark_blocks,
                                                   ") and vocab_size (", vocab_size,
                                                   ") must be ≥ 0"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const EngineOptions& options,
                                                       StepExecutor* executor,
                                                       const Tokenizer* tokenizer) {
  TPSERVE_RETURN_IF_ERROR(options.Validate());
  if (executor == nullptr) return absl::InvalidArgumentError("executor must not be null");
  BlockManagerConfig config;
  config.num_blocks = executor->num_kv_blocks();
  config.block_size = executor->kv_block_size();
  config.watermark_blocks = options.kv_watermark_blocks;
  config.prefix_caching = options.prefix_caching;
  TPSERVE_ASSIGN_OR_RETURN(BlockManager blocks, BlockManager::Create(config));
  return std::unique_ptr<Engine>(new Engine(
      std::make_unique<Impl>(options, executor, tokenizer, std::move(blocks))));
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Engine::~Engine() { Stop(); }

void Engine::Start() {
  absl::MutexLock stop_lock(&impl_->stop_mu);
  {
    absl::MutexLock lock(&impl_->mu);
    if (impl_->stopping || impl_->thread.joinable()) return;
  }
  impl_->thread = std::thread([impl = impl_.get()] { impl->Loop(); });
}

void Engine::Stop() {
  absl::MutexLock stop_lock(&impl_->stop_mu);
  {
    absl::MutexLock lock(&impl_->mu);
    impl_->stopping = true;
    impl_->is_healthy = false;
  }
  if (impl_->thread.joinable()) impl_->thread.join();
  // The thread failed everything on its way out; this covers a never-started engine.
  impl_->FailAll(absl::UnavailableError("engine stopped"));
}

absl::StatusOr<uint64_t> Engine::Submit(EngineRequest request, ChunkCallback on_chunk,
                                        DoneCallback on_done) {
  TPSERVE_RETURN_IF_ERROR(impl_->Validate(request));
  absl::MutexLock lock(&impl_->mu);
  if (!impl_->is_healthy) return absl::UnavailableError("engine is not serving");
  const size_t queued = impl_->submitted.size() + impl_->stats.waiting;
  if (queued >= static_cast<size_t>(impl_->options.max_queue)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("request queue full (", impl_->options.max_queue, " waiting)"));
  }
  const uint64_t id = impl_->next_id++;
  auto seq = std::make_unique<Sequence>(id, std::move(request), impl_->tokenizer,
                                        impl_->options.eos_token_ids);
  impl_->submitted.emplace_back(
      id, Impl::Request{std::move(seq), std::move(on_chunk), std::move(on_done)});
  return id;
}

void Engine::Abort(uint64_t request_id) {
  absl::MutexLock lock(&impl_->mu);
  impl_->aborts.push_back(request_id);
}

void Engine::CancelAll() {
  absl::MutexLock lock(&impl_->mu);
  impl_->cancel_all = true;
}

absl::StatusOr<int64_t> Engine::ResetPrefixCache(absl::Time deadline) {
  Impl& impl = *impl_;
  absl::MutexLock lock(&impl.mu);
  if (!impl.is_healthy) return absl::UnavailableError("engine is not serving");
  const uint64_t ticket = ++impl.resets_asked;
  auto served = [&impl, ticket]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(impl.mu) {
    return impl.resets_done >= ticket || !impl.is_healthy;
  };
  impl.mu.AwaitWithDeadline(absl::Condition(&served), deadline);
  if (impl.resets_done >= ticket) return impl.resets_dropped;
  if (!impl.is_healthy) return absl::UnavailableError("engine stopped before the reset");
  return absl::DeadlineExceededError("the engine reached no step boundary before the deadline");
}

namespace {

// Submits `request` and waits for it to end; its last chunk's stage times. The engine
// ends it by its deadline; should it not (an engine never started), the wait ends a
// second after it, the request aborted.
absl::StatusOr<StageTimes> RunAlone(Engine& engine, EngineRequest request) {
  const absl::Time give_up = request.deadline + absl::Seconds(1);
  struct Outcome {
    absl::Mutex mu;
    bool done ABSL_GUARDED_BY(mu) = false;
    absl::Status status ABSL_GUARDED_BY(mu);
    StageTimes timing ABSL_GUARDED_BY(mu);
  };
  auto outcome = std::make_shared<Outcome>();
  TPSERVE_ASSIGN_OR_RETURN(const uint64_t id,
                           engine.Submit(
                               std::move(request),
                               [outcome](EngineChunk chunk) {
                                 absl::MutexLock lock(&outcome->mu);
                                 outcome->timing = chunk.timing;
                               },
                               [outcome](absl::Status status) {
                                 absl::MutexLock lock(&outcome->mu);
                                 outcome->status = std::move(status);
                                 outcome->done = true;
                               }));
  absl::MutexLock lock(&outcome->mu);
  if (!outcome->mu.AwaitWithDeadline(absl::Condition(&outcome->done), give_up)) {
    engine.Abort(id);
    return absl::DeadlineExceededError("the warm-up request did not end by its deadline");
  }
  TPSERVE_RETURN_IF_ERROR(outcome->status);
  return outcome->timing;
}

}  // namespace

absl::StatusOr<WarmupTimes> Engine::WarmUp(int prompt_tokens, absl::Time deadline) {
  constexpr int kDecodes = 2;
  // At most half the KV cache, so that the watermark never holds a prompt back.
  int64_t fits = impl_->CapacityTokens() / 2;
  if (impl_->options.limits.max_context() > 0) {
    fits = std::min<int64_t>(fits, impl_->options.limits.max_context());
  }
  WarmupTimes times;
  times.prompt_tokens = static_cast<int>(std::clamp<int64_t>(fits - kDecodes - 1, 0, prompt_tokens));
  if (times.prompt_tokens == 0) return times;
  // Ids below 256 exist in every vocabulary; the two rounds' prompts differ from their
  // first token on, so the second is not served from the first's cached blocks.
  const int vocab = impl_->options.vocab_size > 0 ? std::min(impl_->options.vocab_size, 256) : 256;
  auto round = [&](int salt, int max_tokens) {
    EngineRequest request;
    for (int i = 0; i < times.prompt_tokens; ++i) {
      request.prompt_ids.push_back((i * 31 + salt) % vocab);
    }
    request.max_tokens = max_tokens;
    request.ignore_eos = true;
    request.sampling.set_temperature(0);
    request.deadline = deadline;
    return RunAlone(*this, std::move(request));
  };
  // A round's failure fails the warm-up unless the request failed alone.
  auto check = [&](const absl::StatusOr<StageTimes>& ran) -> absl::Status {
    if (ran.ok()) return absl::OkStatus();
    if (!healthy() || ran.status().code() == absl::StatusCode::kDeadlineExceeded) {
      return ran.status();
    }
    if (times.failed_alone.ok()) times.failed_alone = ran.status();
    return absl::OkStatus();
  };
  const absl::StatusOr<StageTimes> cold = round(1, 1);
  TPSERVE_RETURN_IF_ERROR(check(cold));
  if (cold.ok()) times.cold_prefill = absl::Seconds(cold->prefill_s);
  {
    absl::MutexLock lock(&impl_->mu);
    impl_->forget_step_costs = true;
  }
  const absl::StatusOr<StageTimes> warm = round(2, 1 + kDecodes);
  TPSERVE_RETURN_IF_ERROR(check(warm));
  if (warm.ok()) {
    times.prefill = absl::Seconds(warm->prefill_s);
    times.decode = absl::Seconds(warm->decode_s / kDecodes);
  }
  TPSERVE_RETURN_IF_ERROR(ResetPrefixCache(deadline).status());
  return times;
}

bool Engine::healthy() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->is_healthy;
}

EngineStats Engine::stats() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->stats;
}

}  // namespace tpserve
