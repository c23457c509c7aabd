// StepTokenBudget: how many tokens the next engine step may compute so that it takes
// about a target wall time (`--step-time-target-ms`), learned from the steps that ran.
//
// A step's time grows with the tokens it computes (prefill chunks) on top of a part every
// step pays (streaming the weights once, the collectives). The estimate is the time per
// token of recent steps that computed at least kMinObservedTokens, whole step time over
// tokens: it counts the fixed part in, so it over-estimates the cost of a token and the
// budget errs short. It follows a slower step at once (a budget too large costs a step
// past the target, decodes waiting behind it) and a faster one gradually. Until a step
// has been observed the budget is kInitialTokens, so a cold server's first step cannot
// be a 2,048-token prefill that takes a minute on one CPU core.
//
// With a target, decodes' time per token while long prompts are prefilled stays near the
// target (a decode waits at most one step), instead of growing with max_batch_tokens.
//
// Thread-compatible: the engine thread is its only user.
#ifndef TPSERVE_SERVER_STEP_TOKEN_BUDGET_H_
#define TPSERVE_SERVER_STEP_TOKEN_BUDGET_H_

#include <cstdint>

#include "absl/time/time.h"

namespace tpserve {

class StepTokenBudget {
 public:
  static constexpr int64_t kInitialTokens = 64;
  static constexpr int64_t kMinTokens = 16;
  static constexpr int64_t kMinObservedTokens = 8;

  // target 0: no target, the budget is max_tokens always. max_tokens ≥ 1.
  StepTokenBudget(absl::Duration target, int64_t max_tokens);

  // A step computed `tokens` (prefill chunks and decodes) in `took`.
  void Observe(int64_t tokens, absl::Duration took);
  // Tokens for the next step, in [min(kMinTokens, max_tokens), max_tokens].
  int64_t tokens() const;
  // The estimated time per token; zero before any observation.
  absl::Duration per_token() const { return per_token_; }

 private:
  absl::Duration target_;
  int64_t max_tokens_;
  absl::Duration per_token_ = absl::ZeroDuration();
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_STEP_TOKEN_BUDGET_H_
