// Scheduler: decides, step by step, which sequences run and builds the StepPlan.
//
// Each step reads top to bottom:
//  1. Decode part: running sequences, oldest first, each get their next tokens — one
//     for a decode, a chunk for a prompt still being prefilled (chunks only use the
//     budget left after every decode behind them is reserved, so a long prompt never
//     blocks decodes). A sequence that needs a new KV block and finds none preempts
//     the newest running sequence (or itself, if it is the newest): its blocks are
//     freed, it goes back to the front of the waiting queue and is later recomputed
//     from prompt + generated tokens, sent again in full as a NewSequence.
//  2. Prefill part (skipped in a step that preempted): waiting sequences, in FIFO
//     order, are admitted while max_sequences, max_batch_tokens and the KV watermark
//     allow; a prompt that does not fit in the budget is prefilled in chunks. Given a
//     step cost model (set_step_cost), a burst of prompts is admitted in groups sized
//     for the lowest mean time to first token (GroupTokens below). With
//     prefix caching, the whole blocks a new sequence shares with cached KV (all but
//     its last token at most, none when it asks for prompt logprobs) are not computed:
//     the NewSequence names them as num_cached_tokens. Every block a step fills is
//     offered to the cache when the step completes. A waiting sequence whose next
//     block is being filled in this same step by another (a burst of requests with one
//     system prompt) waits a step for it, at most kMaxPrefixDeferrals steps in all.
// The plan carries the ids to drop (sequences removed or preempted since the last
// plan that the workers hold), new sequences in full and running ones as deltas.
//
// Thread-compatible: the engine thread is its only user. Sequences are owned by the
// caller and must stay alive until Remove()d.
#ifndef TPSERVE_SERVER_SCHEDULER_H_
#define TPSERVE_SERVER_SCHEDULER_H_

#include <cstdint>
#include <deque>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/block_manager.h"
#include "server/sequence.h"
#include "tpserve/v1/batch_limits.h"
#include "tpserve/v1/worker.pb.h"

namespace tpserve {

// How many steps a waiting sequence may wait for another to compute its next prefix
// block, in all; past it, it computes the block itself.
inline constexpr int kMaxPrefixDeferrals = 8;

// One sequence's part in a step: tokens [first_position, first_position + num_new_tokens).
struct ScheduledSequence {
  Sequence* seq = nullptr;
  int64_t first_position = 0;
  int64_t num_new_tokens = 0;

  // Whether the step reaches the end of the known tokens, so a token is sampled.
  bool samples() const { return first_position + num_new_tokens == seq->num_tokens(); }
};

struct ScheduledStep {
  worker::v1::StepPlan plan;
  // In the plan's batch order: new sequences, then running ones. Empty: nothing to run
  // (then the plan is not to be sent, and no step number was used).
  std::vector<ScheduledSequence> batch;
};

class Scheduler {
 public:
  // `blocks` outlives the scheduler. Plans keep to limits.max_batch_tokens tokens and
  // limits.max_sequences running sequences (valid: ValidateBatchLimits).
  Scheduler(const BatchLimits& limits, BlockManager* blocks);

  // Queues a new sequence at the back of the waiting queue.
  void Add(Sequence* seq);
  // Forgets a finished or aborted sequence: frees its blocks now; the next plan drops it.
  void Remove(Sequence* seq);

  ScheduledStep Schedule();
  // Caps the tokens of later steps below limits.max_batch_tokens (StepTokenBudget's
  // estimate for a step-time target). Every running decode still gets its token: the
  // cap applies to prefill chunks, which get at least kMinPrefillTokens when any wait.
  void set_token_budget(int64_t tokens) { token_budget_ = tokens; }
  static constexpr int64_t kMinPrefillTokens = 16;
  // The step cost model, a step of n tokens taking fixed + per_token·n (StepTokenBudget).
  // With it (per_token > 0), a prompt joins a step that already prefills only while the
  // step's prefill tokens stay within GroupTokens(): a burst of prompts is admitted over
  // several steps, each prompt's first token coming out with its group's step, instead
  // of all of them waiting for one step that computes every prompt. per_token zero (the
  // default): as many as the budget allows.
  void set_step_cost(absl::Duration fixed, absl::Duration per_token);
  // Prompt tokens a step may carry (its first prompt or chunk goes whatever its size)
  // for the lowest mean time to first token of the prompts queued now (waiting, or running with more
  // than one token to compute: Q tokens). Prefilling them g tokens a step takes Q/g
  // steps of F' + c·g each, F' the step's cost without prefill (fixed plus its
  // decodes); the prompts' mean wait is about (Q/g + 1)/2 such steps, least at
  // g = sqrt(Q·F'/c). A host whose steps cost mostly per token (a CPU prefilling) gets
  // small groups, one whose steps cost mostly their fixed part (a GPU, weights streamed
  // once whatever the batch) takes the burst at once. INT64_MAX without a model.
  int64_t GroupTokens() const;
  // Records that `step` ran: its sequences' tokens are computed.
  void CompleteStep(const ScheduledStep& step);

  bool HasWork() const { return !running_.empty() || !waiting_.empty(); }
  int num_running() const { return static_cast<int>(running_.size()); }
  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  // Sequences preempted (KV freed, to be recomputed) so far.
  uint64_t num_preemptions() const { return preemptions_; }
  uint64_t next_step() const { return next_step_; }
  // Prompt tokens looked up in the prefix cache at first admission (not those of
  // requests for prompt logprobs), and how many of them were found there.
  struct PrefixCacheStats {
    uint64_t queried_tokens = 0;
    uint64_t hit_tokens = 0;
  };
  const PrefixCacheStats& prefix_cache_stats() const { return prefix_cache_; }

 private:
  // The decode part: returns false when it preempted.
  bool ScheduleRunning(int64_t& budget, ScheduledStep& step);
  // The prefill part.
  void AdmitWaiting(int64_t& budget, int64_t group, ScheduledStep& step);
  // Preempts running sequences, newest first, until `index` can grow by one token;
  // false when `index` itself was preempted.
  bool MakeRoom(size_t index);
  void Preempt(Sequence* seq);
  // Tokens seq can grow by with its blocks and the free ones.
  int64_t TokensThatFit(const Sequence& seq) const;
  // Whether a sequence of `step` or of `admitted` fills, in this step, the block after the
  // first num_cached of `tokens` with exactly those tokens (and the same before them).
  bool FilledThisStep(absl::Span<const int32_t> tokens, int64_t num_cached,
                      const ScheduledStep& step,
                      absl::Span<const ScheduledSequence> admitted) const;
  // The most tokens (≤ limit) of a waiting sequence after its `cached` blocks that
  // Allocate accepts now.
  int64_t AdmissibleTokens(int64_t limit, absl::Span<const int32_t> cached) const;
  int64_t NumDecodes() const;
  int64_t token_budget_ = INT64_MAX;
  absl::Duration fixed_cost_ = absl::ZeroDuration();
  absl::Duration per_token_cost_ = absl::ZeroDuration();

  const BatchLimits limits_;
  BlockManager& blocks_;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;  // oldest first
  std::vector<uint64_t> drops_;     // for the next plan
  uint64_t next_step_ = 1;
  uint64_t preemptions_ = 0;
  PrefixCacheStats prefix_cache_;
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_SCHEDULER_H_
