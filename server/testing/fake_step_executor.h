// FakeStepExecutor: an in-process StepExecutor for scheduler and engine tests. It
// checks every plan as a worker would and "samples" deterministically.
//
// It keeps its own model of each sequence (tokens, computed count, block table) built
// from the plans alone, so a wrong delta shows up: steps must be consecutive, drops and
// deltas must name sequences it holds, new sequences must be unknown, a delta must
// carry exactly the token sampled for it since it last ran, block tables must cover
// the context exactly, and the batch must respect the configured limits. It also models
// the KV cache itself: each computed position writes a key of the sequence's tokens up
// to it into its block's slot, and that content outlives the sequence. A block that two
// live sequences hold (a shared prefix) must never be written, and every position a
// sequence has computed — its num_cached_tokens included — must hold the key of its own
// prefix when it runs, so a prefix cache that shares the wrong block, or hands out a
// block another sequence still uses, fails here. A broken rule is recorded in errors()
// and fails the step with INTERNAL.
//
// The next token is next_token(all tokens so far) — by default a hash of the history —
// so a sequence's output depends on its tokens alone: batching, chunked prefill and
// preemption must not change it.
//
// RunStep from one thread; the accessors from any.
#ifndef TPSERVE_SERVER_TESTING_FAKE_STEP_EXECUTOR_H_
#define TPSERVE_SERVER_TESTING_FAKE_STEP_EXECUTOR_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "server/pool/step_executor.h"
#include "tpserve/v1/batch_limits.h"

namespace tpserve {

struct FakeExecutorConfig {
  int num_blocks = 64;
  int block_size = 4;
  int vocab_size = 1000;
  BatchLimits limits = DefaultBatchLimits();  // every plan is checked against them, as a rank does
  // Default: HashNextToken(history, vocab_size).
  std::function<int32_t(absl::Span<const int32_t>)> next_token;
  uint64_t fail_at_step = 0;  // this step and every later one are UNAVAILABLE; 0: never
  // Applied to each result before it is returned: a rank that breaks the protocol.
  std::function<void(worker::v1::StepResult*)> corrupt;
  absl::Duration step_delay = absl::ZeroDuration();
  // Slept for each token a plan computes, after step_delay: a step of n tokens takes
  // step_delay + n · token_delay, as a host's weight streaming plus its compute.
  absl::Duration token_delay = absl::ZeroDuration();
  // Added to the first step only: a cold rank (page faults, kernel set-up).
  absl::Duration first_step_delay = absl::ZeroDuration();
};

class FakeStepExecutor : public StepExecutor {
 public:
  explicit FakeStepExecutor(FakeExecutorConfig config);

  absl::StatusOr<worker::v1::StepResult> RunStep(const worker::v1::StepPlan& plan) override;
  int num_kv_blocks() const override { return config_.num_blocks; }
  int kv_block_size() const override { return config_.block_size; }

  static int32_t HashNextToken(absl::Span<const int32_t> history, int vocab_size);
  // A next_token that answers every sequence with `script`, then `end` (e.g. EOS): the
  // token after the longest prefix of the script that ends the history (so the prompt
  // must not end with a prefix of it).
  static std::function<int32_t(absl::Span<const int32_t>)> ScriptedAnswer(
      std::vector<int32_t> script, int32_t end);
  // The default model's first n tokens after `prompt`, for a sequence alone.
  static std::vector<int32_t> HashContinuation(std::vector<int32_t> prompt, int n,
                                               int vocab_size);

  std::vector<std::string> errors() const;
  int num_live_sequences() const;
  bool holds(uint64_t seq_id) const;
  // New sequences that carried generated tokens (recomputes after preemption).
  int num_recomputes() const;
  // New sequences or deltas that computed only part of the known tokens.
  int num_partial_prefills() const;
  // Positions computed, and new sequences' positions taken from the cache
  // (num_cached_tokens), over all steps.
  int64_t num_computed_positions() const;
  int64_t num_cached_positions() const;
  // Each step's tokens (new sequences' and deltas' num_new_tokens), in step order.
  std::vector<int64_t> step_tokens() const;

 private:
  struct Seq {
    std::vector<int32_t> tokens;
    std::vector<uint64_t> keys;  // keys[p]: the KV key of tokens [0, p]
    int64_t num_prompt = 0;
    int64_t computed = 0;
    std::vector<int32_t> blocks;
    std::optional<int32_t> sampled;  // sampled, not yet sent back in a delta
    worker::v1::WorkerSamplingParams sampling;
  };

  absl::Status Apply(const worker::v1::StepPlan& plan) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status AddNew(const worker::v1::NewSequence& added) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ApplyDelta(const worker::v1::SequenceDelta& delta)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status TakeBlocks(uint64_t id, absl::Span<const int32_t> blocks, Seq& seq)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckCoverage(uint64_t id, const Seq& seq, int64_t num_new) const;
  // Positions [0, seq.computed) hold seq's own KV; the next num_new go to blocks it
  // alone holds.
  absl::Status CheckKv(uint64_t id, const Seq& seq, int64_t num_new) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  worker::v1::SequenceOutput Compute(uint64_t id, int64_t num_new, Seq& seq)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ExtendKeys(Seq& seq) const;

  const FakeExecutorConfig config_;
  mutable absl::Mutex mu_;
  uint64_t last_step_ ABSL_GUARDED_BY(mu_) = 0;
  bool failed_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<uint64_t, Seq> seqs_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int32_t, int> block_holders_ ABSL_GUARDED_BY(mu_);  // live sequences
  // Each block's slots: the KV key last written there, 0 for never.
  absl::flat_hash_map<int32_t, std::vector<uint64_t>> kv_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> errors_ ABSL_GUARDED_BY(mu_);
  int recomputes_ ABSL_GUARDED_BY(mu_) = 0;
  int partial_prefills_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int64_t> step_tokens_ ABSL_GUARDED_BY(mu_);
  int64_t computed_positions_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t cached_positions_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_TESTING_FAKE_STEP_EXECUTOR_H_
