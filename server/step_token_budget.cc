#include "server/step_token_budget.h"

#include <algorithm>

namespace tpserve {
namespace {

// Weight of a new observation in a running average (a slower prefill step: 1).
constexpr double kDecay = 0.25;

}  // namespace

void StepTokenBudget::Mean::Add(double n, double t, double weight) {
  if (!seen) weight = 1;
  seen = true;
  tokens += (n - tokens) * weight;
  seconds += (t - seconds) * weight;
}

StepTokenBudget::StepTokenBudget(absl::Duration target, int64_t max_tokens)
    : target_(target), max_tokens_(std::max<int64_t>(max_tokens, 1)) {}

bool StepTokenBudget::modelled() const {
  return decode_.seen && prefill_.seen && prefill_.tokens - decode_.tokens >= kMinSpread;
}

absl::Duration StepTokenBudget::per_token() const {
  if (!prefill_.seen) return absl::ZeroDuration();
  double c = prefill_.seconds / prefill_.tokens;  // F counted in: an over-estimate
  if (modelled()) {
    c = (prefill_.seconds - decode_.seconds) / (prefill_.tokens - decode_.tokens);
  }
  return absl::Seconds(std::max(c, 0.0));
}

absl::Duration StepTokenBudget::fixed() const {
  if (!decode_.seen) return absl::ZeroDuration();
  const double f = decode_.seconds - absl::ToDoubleSeconds(per_token()) * decode_.tokens;
  return absl::Seconds(std::max(f, 0.0));
}

void StepTokenBudget::Observe(int64_t tokens, absl::Duration took, bool prefill) {
  if (tokens <= 0) return;
  const double n = static_cast<double>(tokens), t = absl::ToDoubleSeconds(took);
  if (!prefill) {
    decode_.Add(n, t, kDecay);
    return;
  }
  const bool slower = prefill_.seen && took > fixed() + per_token() * n;
  prefill_.Add(n, t, slower ? 1.0 : kDecay);
}

int64_t StepTokenBudget::tokens() const {
  if (target_ <= absl::ZeroDuration()) return max_tokens_;
  const int64_t floor = std::min(kMinTokens, max_tokens_);
  if (!prefill_.seen) return std::min(kInitialTokens, max_tokens_);
  const absl::Duration c = per_token();
  if (c <= absl::ZeroDuration()) return max_tokens_;  // more tokens cost nothing seen yet
  const double fit = absl::FDivDuration(target_ - fixed(), c);
  if (fit >= static_cast<double>(max_tokens_)) return max_tokens_;
  return std::max(floor, static_cast<int64_t>(fit));
}

}  // namespace tpserve
