// Engine::Impl: the engine's state and its step loop (see engine.h for the contract).
//
// The engine thread owns the block manager, the scheduler and the live requests; other
// threads only reach the fields guarded by `mu` (submissions, aborts, health, stats).
// Callbacks run on the engine thread with `mu` released, so they may call Abort().
#ifndef TPSERVE_SERVER_ENGINE_LOOP_H_
#define TPSERVE_SERVER_ENGINE_LOOP_H_

#include <cstdint>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "server/block_manager.h"
#include "server/engine.h"
#include "server/scheduler.h"
#include "server/sequence.h"
#include "server/step_token_budget.h"

namespace tpserve {

struct Engine::Impl {
  struct Request {
    std::unique_ptr<Sequence> seq;
    ChunkCallback on_chunk;
    DoneCallback on_done;
  };

  Impl(const EngineOptions& options, StepExecutor* executor, const Tokenizer* tokenizer,
       BlockManager block_manager)
      : options(options),
        executor(*executor),
        tokenizer(tokenizer),
        blocks(std::move(block_manager)),
        scheduler(options.limits, &blocks),
        token_budget(options.step_time_target, options.limits.max_batch_tokens()) {
    stats.kv_blocks_total = blocks.num_blocks();
    scheduler.set_token_budget(token_budget.tokens());
  }

  absl::Status Validate(const EngineRequest& request) const;
  // Tokens the whole KV cache holds.
  int64_t CapacityTokens() const { return int64_t{blocks.num_blocks()} * blocks.block_size(); }
  // The engine thread.
  void Loop();
  // Takes new requests and aborts; false once stopping.
  bool Intake();
  void EndExpired();
  void WaitForInput(absl::Time deadline);
  absl::Status RunStep(const ScheduledStep& step);
  absl::Status ApplyOutputs(const ScheduledStep& step, const worker::v1::StepResult& result);
  void AppendToken(Sequence* seq, const worker::v1::SequenceOutput& output);
  // Ends a live request: frees its blocks, then on_done(status).
  void End(uint64_t id, absl::Status status);
  // A live request whose sequence has its finish reason: frees its blocks, sends its
  // last chunk (finish reason, usage), then on_done(OK).
  void Complete(uint64_t id);
  // Ends every request, live or submitted, with `status`.
  void FailAll(const absl::Status& status);
  // Finishes every live request with FINISH_REASON_CANCELLED: a last chunk (text held
  // back flushed, usage), then OK.
  void CancelLive();
  // Copies the gauges (blocks, running, waiting) into stats.
  void PublishStats();
  void RecordStep(absl::Duration step_time, int64_t compute_us);
  bool HasInput() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return !submitted.empty() || !aborts.empty() || cancel_all || stopping ||
           resets_asked != resets_done || forget_step_costs;
  }

  const EngineOptions options;
  StepExecutor& executor;
  const Tokenizer* const tokenizer;

  // Engine thread only (or any thread once it has been joined).
  BlockManager blocks;
  Scheduler scheduler;
  StepTokenBudget token_budget;
  absl::flat_hash_map<uint64_t, Request> live;
  std::thread thread;

  mutable absl::Mutex mu;
  std::vector<std::pair<uint64_t, Request>> submitted ABSL_GUARDED_BY(mu);
  std::vector<uint64_t> aborts ABSL_GUARDED_BY(mu);
  uint64_t next_id ABSL_GUARDED_BY(mu) = 1;
  bool stopping ABSL_GUARDED_BY(mu) = false;
  bool cancel_all ABSL_GUARDED_BY(mu) = false;  // CancelAll() asked; Intake acts on it
  // ResetPrefixCache() calls asked and served; Intake serves them all at once, and
  // resets_dropped is what the last one dropped.
  uint64_t resets_asked ABSL_GUARDED_BY(mu) = 0;
  uint64_t resets_done ABSL_GUARDED_BY(mu) = 0;
  int64_t resets_dropped ABSL_GUARDED_BY(mu) = 0;
  // WarmUp's first round is over: Intake starts the step cost model afresh.
  bool forget_step_costs ABSL_GUARDED_BY(mu) = false;
  bool is_healthy ABSL_GUARDED_BY(mu) = true;
  EngineStats stats ABSL_GUARDED_BY(mu);
  absl::Mutex stop_mu;  // serialises Stop()
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_ENGINE_LOOP_H_
