#include "server/step_token_budget.h"

#include <algorithm>

namespace tpserve {
namespace {

// Weight of a new, faster observation in the estimate.
constexpr double kDecay = 0.25;

}  // namespace

StepTokenBudget::StepTokenBudget(absl::Duration target, int64_t max_tokens)
    : target_(target), max_tokens_(std::max<int64_t>(max_tokens, 1)) {}

void StepTokenBudget::Observe(int64_t tokens, absl::Duration took) {
  if (target_ <= absl::ZeroDuration() || tokens < kMinObservedTokens) return;
  const absl::Duration sample = took / tokens;
  if (per_token_ == absl::ZeroDuration() || sample > per_token_) {
    per_token_ = sample;  // slower: at once
  } else {
    per_token_ = per_token_ * (1 - kDecay) + sample * kDecay;
  }
}

int64_t StepTokenBudget::tokens() const {
  if (target_ <= absl::ZeroDuration()) return max_tokens_;
  const int64_t floor = std::min(kMinTokens, max_tokens_);
  if (per_token_ <= absl::ZeroDuration()) return std::min(kInitialTokens, max_tokens_);
  const double fit = absl::FDivDuration(target_, per_token_);
  if (fit >= static_cast<double>(max_tokens_)) return max_tokens_;
  return std::max(floor, static_cast<int64_t>(fit));
}

}  // namespace tpserve
