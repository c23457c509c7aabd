// Sampling rules shared by every sampler backend: the CPU sampler (worker/sampling/sampler.cc)
// and the GPU one (worker/sampling/cuda_sampler.cc) validate requests, word their errors,
// decide greedy and penalties, round the penalty arithmetic and draw the step's uniform
// through these functions, so the two agree by construction. The GPU kernels repeat the
// two penalty formulas in device code (worker/kernels/cuda/sampling.cu), which
// sampling_test checks bit for bit against these. Pure functions; any thread.
#ifndef TPSERVE_WORKER_SAMPLING_SAMPLING_RULES_H_
#define TPSERVE_WORKER_SAMPLING_SAMPLING_RULES_H_

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "worker/sampling/sampling_params.h"

namespace tpserve {

// Whether steps 1 and 2 of sampler.h change any logit.
bool HasPenalties(const SamplingParams& p);

// Step 3: temperature 0, or so small that 1/T overflows, samples the argmax.
bool IsGreedy(const SamplingParams& p);

// Step 1 on one logit of a token seen in prompt + output.
inline float RepetitionPenalised(float logit, float penalty) {
  return logit > 0 ? logit / penalty : logit * penalty;
}

// Step 2: what is subtracted from a logit whose token occurs `count` > 0 times in the
// output. Rounded once (a fused multiply-add), as GCC has always compiled
// `presence + frequency * count` for x86-64-v3; spelt out so no compiler can differ.
inline float PresenceFrequencyPenalty(float presence, float frequency, int32_t count) {
  return std::fma(frequency, static_cast<float>(count), presence);
}

// Step 7's u ∈ [0, 1): a counter-based hash of (seed, step) alone.
double StepUniform(uint64_t seed, uint64_t step);

// INVALID_ARGUMENT "field must be limit, got value".
absl::Status OutOfRange(const char* field, const char* limit, double value);

// OK when every token is in [0, vocab); else INVALID_ARGUMENT naming field[i].
absl::Status CheckTokens(absl::Span<const int32_t> tokens, const char* field, int64_t vocab);

// SampleBatch's per-request checks: params, seed set, row in [0, rows), history tokens.
absl::Status CheckSampleRequest(const SampleRequest& r, int64_t rows, int64_t vocab);

// PromptLogprobs' checks: rows [first_row, first_row + n) exist, top_n, tokens.
absl::Status CheckPromptLogprobs(int64_t rows, int64_t first_row,
                                 absl::Span<const int32_t> next_tokens, int top_n,
                                 int64_t vocab);

// The errors of a row that cannot be sampled.
absl::Status RowNotFiniteError();
absl::Status PenalisedOverflowError();

// `s` with "request i: " (SampleBatch) or "row r: " (PromptLogprobs) in front.
absl::Status ForRequest(size_t i, const absl::Status& s);
absl::Status ForRow(int64_t row, const absl::Status& s);

}  // namespace tpserve

#endif  // TPSERVE_WORKER_SAMPLING_SAMPLING_RULES_H_
