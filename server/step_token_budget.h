// StepTokenBudget: how many tokens the next engine step may compute so that it takes
// about a target wall time (`--step-time-target-ms`), learned from the steps that ran.
//
// A step's time is modelled as F + c·n for n tokens: F, the part every step pays
// (streaming the weights once, the collectives, the round trip to the ranks), and c, the
// cost of one more token (its share of the GEMMs' compute, attention). Two running
// averages feed it: decode-only steps (one token per sequence: they measure F, plus c
// for each decode) and steps that prefill; c is the slope between the two, F what is
// left of the decode steps' time. Until a decode step has been seen, or while the two
// differ by fewer than kMinSpread tokens, F is taken as zero and c as the prefill steps'
// time per token, which over-estimates c (the budget errs short, as it should on a host
// not yet measured). A prefill step slower than the model predicts moves it at once (a
// budget too large costs a step past the target, decodes waiting behind it), a faster
// one gradually. Until a prefill step has been observed the budget is kInitialTokens, so
// a cold server's first step cannot be a 2,048-token prefill that takes a minute on one
// CPU core.
//
// The budget is (target − F) / c: with a target, decodes' time per token while long
// prompts are prefilled stays near the target (a decode waits at most one step), instead
// of growing with max_batch_tokens. Whole-step time over tokens (this class's former
// estimate) counted F into every token, so a run of decode steps (16 tokens in 110 ms: 7
// ms "a token" against a prefill's 2) shrank the budget to a third of what the target
// holds.
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
  // The slope needs the prefill steps' mean this many tokens past the decode steps'.
  static constexpr double kMinSpread = 8;

  // target 0: no target, the budget is max_tokens always. max_tokens ≥ 1.
  StepTokenBudget(absl::Duration target, int64_t max_tokens);

  // A step computed `tokens` (prefill chunks and decodes) in `took`; `prefill`: some of
  // them were prompt tokens (false: one token per running sequence).
  void Observe(int64_t tokens, absl::Duration took, bool prefill);
  // Tokens for the next step, in [min(kMinTokens, max_tokens), max_tokens].
  int64_t tokens() const;
  // The model's c, the time one more token adds to a step; zero before a prefill step.
  absl::Duration per_token() const;
  // The model's F, the time a step takes whatever its tokens; zero before a decode step.
  absl::Duration fixed() const;
  // Whether F and c are both measured: decode-only and prefill steps seen, their mean
  // token counts at least kMinSpread apart.
  bool modelled() const;

 private:
  // A running average of steps' token counts and times (seconds).
  struct Mean {
    bool seen = false;
    double tokens = 0;
    double seconds = 0;
    void Add(double n, double t, double weight);
  };

  absl::Duration target_;
  int64_t max_tokens_;
  Mean decode_, prefill_;
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_STEP_TOKEN_BUDGET_H_
