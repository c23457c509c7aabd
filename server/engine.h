// Engine: the frontend's step loop with continuous batching over a paged KV cache.
//
// Requests are submitted (already tokenized and validated) from any thread; the engine
// thread repeatedly schedules a step (new requests join at step boundaries; limits on
// batch tokens and sequences; the block manager allocates KV blocks; when blocks run
// out the newest running sequence is preempted and later recomputed), runs it on the
// StepExecutor, appends the sampled tokens, checks stop conditions (max_tokens, EOS
// unless ignore_eos, stop_token_ids, stop strings on the detokenized text), and streams
// chunks through each request's callbacks — from the engine thread, so callbacks must
// be quick and must not call back into the engine except Abort().
//
// A request ends exactly once: on_done(OK) after the last chunk (which carries the
// finish reason and usage), or on_done(error) — UNAVAILABLE when the executor fails,
// DEADLINE_EXCEEDED past the request's deadline, CANCELLED after Abort. Its KV blocks
// are free by the end of the step in which it ended.
#ifndef TPSERVE_SERVER_ENGINE_H_
#define TPSERVE_SERVER_ENGINE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/pool/step_executor.h"
#include "server/request.h"
#include "server/tokenizer/tokenizer.h"
#include "tpserve/v1/batch_limits.h"

namespace tpserve {

struct EngineOptions {
  // Tokens and sequences per step; max_context: prompt + generated tokens per sequence
  // (0: only the KV cache bounds it).
  BatchLimits limits = DefaultBatchLimits();
  int max_queue = 256;           // waiting requests; beyond it Submit is RESOURCE_EXHAUSTED
  int kv_watermark_blocks = 1;   // kept free when admitting new sequences
  bool prefix_caching = true;    // share computed KV blocks of common prompt prefixes
  int vocab_size = 0;            // sampled token ids must be in [0, vocab_size); 0: unchecked
  std::vector<int32_t> eos_token_ids;
  // When positive, steps are sized to take about this long (StepTokenBudget): prefill
  // chunks shrink on a slow host so decodes keep their pace; zero: max_batch_tokens.
  absl::Duration step_time_target = absl::ZeroDuration();
  // A burst of prompts is admitted in groups sized for the lowest mean time to first
  // token, from the step cost model measured as steps run (Scheduler::GroupTokens);
  // false: each step admits as many as the token budget allows.
  bool staggered_admission = true;
  // Called once, on the engine thread, when a step fails: before the engine turns
  // unhealthy (refusing new requests) and ends the ones it holds. Whoever reports health
  // (the supervisor) turns it NOT_SERVING here, so a client that saw UNAVAILABLE never
  // then finds the server SERVING with the failed engine. Must not call back into the
  // engine.
  std::function<void(const absl::Status&)> on_failure;

  absl::Status Validate() const;
};

// What Engine::WarmUp measured.
struct WarmupTimes {
  int prompt_tokens = 0;  // each round's prompt (0: none fitted; nothing ran)
  absl::Duration cold_prefill;  // the first round's prefill, on ranks that had not run a step
  absl::Duration prefill;       // the second round's
  absl::Duration decode;        // a decode step of the second round (the mean of two)
  // A warm-up request's own failure, the engine still serving (the model's answer to
  // the warm-up prompt, e.g. non-finite logits, fails that request as it would a
  // client's); the times of a round that failed are zero.
  absl::Status failed_alone;
};

struct EngineStats {
  int kv_blocks_total = 0;
  int kv_blocks_in_use = 0;
  int running = 0;
  int waiting = 0;
  uint64_t steps = 0;
  uint64_t preemptions = 0;  // sequences preempted (KV freed, recomputed later)
  uint64_t prefix_cache_queried_tokens = 0;  // prompt tokens looked up at admission
  uint64_t prefix_cache_hit_tokens = 0;      // of them, found in the prefix cache
  int kv_blocks_cached = 0;                  // blocks whose KV is matchable now
  // Cumulative time in RunStep as seen by the engine, and the workers' own compute time
  // (rank 0's compute_time_us): their difference is the frontend overhead.
  int64_t step_wall_us = 0;
  int64_t worker_compute_us = 0;
};

class Engine {
 public:
  using ChunkCallback = std::function<void(EngineChunk)>;
  using DoneCallback = std::function<void(absl::Status)>;

  // `executor` and `tokenizer` (may be null: no text, token ids only) outlive the engine.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const EngineOptions& options,
                                                        StepExecutor* executor,
                                                        const Tokenizer* tokenizer);
  ~Engine();  // Stop()

  // Starts the engine thread. Requests submitted before Start wait in the queue.
  void Start();
  // Ends every request with UNAVAILABLE and joins the engine thread. Idempotent; not
  // from a callback.
  void Stop();

  // Queues a request. INVALID_ARGUMENT for an empty prompt, max_tokens < 1, or prompt +
  // max_tokens beyond max_context or beyond the whole KV cache (it could never finish);
  // RESOURCE_EXHAUSTED when the queue is full; UNAVAILABLE when the engine is stopped or
  // its executor failed. Returns the request id. Token ids and text follow request.h.
  absl::StatusOr<uint64_t> Submit(EngineRequest request, ChunkCallback on_chunk,
                                  DoneCallback on_done);
  // Ends a request with CANCELLED (if it has not ended) and frees its blocks within one
  // step. Safe from any thread, including from inside a callback.
  void Abort(uint64_t request_id);
  // Finishes every request running or queued now, within one step: each gets a last
  // chunk with FinishReason::kCancelled (and usage), then OK — the end of a drain's
  // grace. Safe from any thread.
  void CancelAll();
  // Runs the model before the engine serves: a prompt of `prompt_tokens` (fewer where
  // max_context or the KV cache allow fewer) prefilled alone, which pays a rank's
  // first-step costs (page faults on fresh buffers, kernel set-up), then a second prompt
  // prefilled and decoded two steps, from which the step cost model starts (so that a
  // first burst of prompts is already admitted in groups, and a step-time target holds
  // from the first step); the first round's steps are not counted in it. The warm-up's
  // blocks leave the prefix cache; its steps count in stats(). Call after Start() and
  // before serving anything. A failed step fails it (and the engine, as any step
  // would); DEADLINE_EXCEEDED past `deadline`; a warm-up request that fails alone is
  // reported in failed_alone.
  absl::StatusOr<WarmupTimes> WarmUp(int prompt_tokens, absl::Time deadline);

  // Empties the prefix cache (BlockManager::ResetPrefixCache) on the engine thread,
  // between steps, and returns how many blocks left it. UNAVAILABLE when the engine is
  // stopped or failed, DEADLINE_EXCEEDED when no step boundary came before `deadline`
  // (the reset still happens at the next one).
  // Safe from any thread but a callback.
  absl::StatusOr<int64_t> ResetPrefixCache(absl::Time deadline);

  // False once the executor has failed or Stop() ran.
  bool healthy() const;
  EngineStats stats() const;

 private:
  struct Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_ENGINE_H_
