// What one request asks of a sampler, and what it gets back: SamplingParams (validated
// against the vocabulary), SampleRequest (one row of a step's logits with the request's
// token history) and SampleResult (the chosen token, its logprob and the top-n). Shared
// by the CPU sampler (sampler.h), the GPU one (cuda_sampler.h) and their common rules
// (sampling_rules.h). The rank fills SamplingParams from the plan's
// worker.v1.SamplingParams in one place (worker/rank/sequence_table.cc). Plain values.
#ifndef TPSERVE_WORKER_SAMPLING_SAMPLING_PARAMS_H_
#define TPSERVE_WORKER_SAMPLING_SAMPLING_PARAMS_H_

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "tpserve/v1/sampling_limits.h"

namespace tpserve {

struct SamplingParams {
  float temperature = 1.0f;  // ≥ 0, finite; 0 = greedy
  int top_k = 0;             // 0 or -1 = off; else in [1, vocab_size]
  float top_p = 1.0f;        // (0, 1]
  float min_p = 0.0f;        // [0, 1]
  float repetition_penalty = 1.0f;  // > 0, finite; 1 = off
  float presence_penalty = 0.0f;    // [-2, 2]
  float frequency_penalty = 0.0f;   // [-2, 2]
  // Unset: the engine draws one from its process-wide source when the request starts
  // and stores it here; the sampler requires it set.
  std::optional<uint64_t> seed;
  int logprobs = 0;                    // top-n per sampled token, [0, kMaxLogprobs]
  std::optional<int> prompt_logprobs;  // unset = none; else top-n, [0, kMaxLogprobs]

  // INVALID_ARGUMENT naming the field and its limit for the first one out of range.
  absl::Status Validate(int64_t vocab_size) const;
};

struct TopToken {
  int32_t token = 0;
  float logprob = 0.0f;
};

// One scored token: the sampled one (SampleBatch) or the actual next prompt token
// (PromptLogprobs).
struct SampleResult {
  int32_t token = 0;
  float logprob = 0.0f;           // raw logprob of `token`
  std::vector<TopToken> top;  // the n most likely tokens, (logprob desc, id asc)
  // OK, or why this request alone failed (SampleBatch: its logits row not finite, or its
  // penalties overflowing it); then token is -1 and nothing else is set. The other
  // requests of the batch are sampled as if it were not there.
  absl::Status status;

  // The result of a request that failed alone with `why`.
  static SampleResult Failed(absl::Status why) {
    SampleResult r;
    r.token = -1;
    r.status = std::move(why);
    return r;
  }
};

struct SampleRequest {
  int64_t row = 0;  // row of the logits tensor holding this request's last position
  SamplingParams params;
  absl::Span<const int32_t> prompt_tokens;
  // Tokens generated so far; its size is the step that the seed is hashed with.
  absl::Span<const int32_t> output_tokens;
};

}  // namespace tpserve

#endif  // TPSERVE_WORKER_SAMPLING_SAMPLING_PARAMS_H_
