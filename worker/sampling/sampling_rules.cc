#include "worker/sampling/sampling_rules.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace tpserve {
namespace {

// SplitMix64's finaliser: a bijective 64-bit mix.
uint64_t Mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

bool HasPenalties(const SamplingParams& p) {
  return p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f ||
         p.frequency_penalty != 0.0f;
}

bool IsGreedy(const SamplingParams& p) {
  return !(1.0f / p.temperature < std::numeric_limits<float>::infinity());
}

double StepUniform(uint64_t seed, uint64_t step) {
  return static_cast<double>(Mix64(Mix64(seed) ^ step) >> 11) * 0x1p-53;
}

absl::Status OutOfRange(const char* field, const char* limit, double value) {
  return absl::InvalidArgumentError(
      absl::StrCat(field, " must be ", limit, ", got ", value));
}

absl::Status CheckTokens(absl::Span<const int32_t> tokens, const char* field,
                         int64_t vocab) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat(field, "[", i, "] = ", tokens[i],
                                                     " is outside [0, ", vocab, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckSampleRequest(const SampleRequest& r, int64_t rows, int64_t vocab) {
  TPSERVE_RETURN_IF_ERROR(r.params.Validate(vocab));
  if (!r.params.seed.has_value()) {
    return absl::InvalidArgumentError("seed is unset: the engine must fill it at start");
  }
  if (r.row < 0 || r.row >= rows) {
    return absl::InvalidArgumentError(
        absl::StrCat("row ", r.row, " is outside [0, ", rows, ")"));
  }
  TPSERVE_RETURN_IF_ERROR(CheckTokens(r.prompt_tokens, "prompt_tokens", vocab));
  return CheckTokens(r.output_tokens, "output_tokens", vocab);
}

absl::Status CheckPromptLogprobs(int64_t rows, int64_t first_row,
                                 absl::Span<const int32_t> next_tokens, int top_n,
                                 int64_t vocab) {
  const int64_t count = next_tokens.size();
  if (first_row < 0 || first_row + count > rows) {
    return absl::InvalidArgumentError(absl::StrCat("rows [", first_row, ", ",
                                                   first_row + count, ") exceed the ",
                                                   rows, " logits rows"));
  }
  if (top_n < 0 || top_n > kMaxLogprobs) return OutOfRange("top_n", "in [0, 20]", top_n);
  return CheckTokens(next_tokens, "next_tokens", vocab);
}

absl::Status RowNotFiniteError() {
  return absl::InternalError("logits row is not finite (NaN, inf or all -inf)");
}

absl::Status PenalisedOverflowError() {
  return absl::InvalidArgumentError(
      "sampling.repetition_penalty, presence_penalty or frequency_penalty overflowed the "
      "logits");
}

absl::Status ForRequest(size_t i, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat("request ", i, ": ", s.message()));
}

absl::Status ForRow(int64_t row, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat("row ", row, ": ", s.message()));
}

absl::Status SamplingParams::Validate(int64_t vocab_size) const {
  // Written as !(in range) so that NaN fails every check.
  if (!(temperature >= 0 && std::isfinite(temperature))) {
    return OutOfRange("temperature", "finite and >= 0", temperature);
  }
  if (top_k < -1 || top_k > vocab_size) {
    return OutOfRange("top_k", absl::StrCat("-1 or 0 (off) or in [1, ", vocab_size, "]").c_str(),
                      top_k);
  }
  if (!(top_p > 0 && top_p <= 1)) return OutOfRange("top_p", "in (0, 1]", top_p);
  if (!(min_p >= 0 && min_p <= 1)) return OutOfRange("min_p", "in [0, 1]", min_p);
  if (!(repetition_penalty >= kMinRepetitionPenalty &&
        repetition_penalty <= kMaxRepetitionPenalty)) {
    return OutOfRange("repetition_penalty", "in [0.01, 100]", repetition_penalty);
  }
  if (!(std::fabs(presence_penalty) <= kMaxAbsPenalty)) {
    return OutOfRange("presence_penalty", "in [-2, 2]", presence_penalty);
  }
  if (!(std::fabs(frequency_penalty) <= kMaxAbsPenalty)) {
    return OutOfRange("frequency_penalty", "in [-2, 2]", frequency_penalty);
  }
  if (logprobs < 0 || logprobs > kMaxLogprobs) {
    return OutOfRange("logprobs", "in [0, 20]", logprobs);
  }
  if (prompt_logprobs && (*prompt_logprobs < 0 || *prompt_logprobs > kMaxLogprobs)) {
    return OutOfRange("prompt_logprobs", "in [0, 20]", *prompt_logprobs);
  }
  return absl::OkStatus();
}

}  // namespace tpserve
