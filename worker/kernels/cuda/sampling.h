// CUDA sampling: the CPU sampler's steps (worker/sampling/sampler.h) on fp32 logits that stay on
// the device, so that only each request's result comes back to the host.
//
// CudaSampler (worker/sampling/cuda_sampler.h) validates the requests on the host, fills the
// per-request structs below and runs, on one stream, one CTA per request:
//  1. LaunchSamplingLogprobs: the raw row's max and argmax, log Σ exp, a non-finite
//     check, the top-n raw logprobs and (prompt logprobs) the given token's logprob.
//  2. LaunchSamplingPenalties (rows with penalties only): a scratch copy of the row with
//     steps 1–2 applied, and its max and argmax.
//  3. LaunchSamplingDraw: greedy, or steps 3–7: top-k, top-p and min-p by radix
//     selection in (weight desc, id asc) order and the draw with the host's u.
// Weights are summed as 43-bit fixed point, so every cumulative mass is exact and the
// same in any summation order; the draw is deterministic. Everything here is enqueued
// asynchronously; the caller synchronises before reading results.
#ifndef TPSERVE_WORKER_KERNELS_CUDA_SAMPLING_H_
#define TPSERVE_WORKER_KERNELS_CUDA_SAMPLING_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tpserve {

// Largest vocabulary the kernels take: 2^20 weights of ≤ 2^43 sum in 64 bits.
inline constexpr int64_t kSamplingMaxVocab = int64_t{1} << 20;
// Most top-n logprobs per row (kMaxLogprobs of tpserve/v1/sampling_limits.h).
inline constexpr int kSamplingMaxTopN = 20;

// Kernel 1's work item: one logits row.
struct SamplingLogprobRow {
  int64_t row = 0;     // row of the logits
  int32_t token = -1;  // scored into SamplingResult::{token, logprob}; -1 = none
  int32_t top_n = 0;   // [0, kSamplingMaxTopN]; clamped to the vocabulary
};

// Kernels 2 and 3's work item: one request, as the host derived it from SamplingParams.
struct SamplingDrawParams {
  int64_t row = 0;  // row of the logits
  double u = 0;     // the step's uniform, [0, 1)
  // [history_begin, output_begin) prompt and [output_begin, history_end) output tokens
  // in the history array; only read when `penalised`.
  int64_t history_begin = 0;
  int64_t output_begin = 0;
  int64_t history_end = 0;
  float scale = 1;  // 1 / temperature, rounded as the CPU does; unused when greedy
  float top_p = 1;
  float min_p = 0;
  float repetition_penalty = 1;
  float presence_penalty = 0;
  float frequency_penalty = 0;
  int32_t top_k = 0;      // in [1, vocab) when it truncates, else 0
  int32_t greedy = 0;     // 1: the (penalised) argmax
  int32_t penalised = 0;  // 1: steps 1–2 apply; scratch row i holds request i's logits
  int32_t reserved = 0;
};

struct SamplingTokenLogprob {
  int32_t token;
  float logprob;
};

// One request's result, copied back to the host as is. Kernel 1 writes the flags and the
// top list, kernel 2 raises penalised_overflow, kernel 3 writes token and logprob.
struct SamplingResult {
  int32_t token;
  float logprob;               // raw logprob of `token`
  int32_t not_finite;          // 1: NaN or +inf in the row, or all −inf
  int32_t penalised_overflow;  // 1: the penalised row's max is not finite
  int32_t lost_selection;      // 1: an internal invariant failed (a bug; fail the call)
  int32_t top_count;
  SamplingTokenLogprob top[kSamplingMaxTopN];  // (logprob desc, id asc)
};

// Device-side statistics of one request, passed from kernel to kernel.
struct SamplingRowStats {
  float max;        // of the raw row
  int32_t argmax;   // lowest id holding it
  float log_norm;   // log Σ exp(raw row), rounded as max + (float)log(Σ exp(row − max))
  float penalised_max;
  int32_t penalised_argmax;
  int32_t reserved;
};

// All pointers are device pointers; logits is [*, vocab] fp32 and each launch runs
// `count` CTAs. Return the launch's error; cudaErrorInvalidValue for a vocab outside
// [1, kSamplingMaxVocab].

// rows: [count]. Writes stats[0, count) and results[0, count) (flags, top list, and
// token/logprob where rows[i].token >= 0).
cudaError_t LaunchSamplingLogprobs(const float* logits, int64_t vocab,
                                   const SamplingLogprobRow* rows, int32_t count,
                                   SamplingRowStats* stats, SamplingResult* results,
                                   cudaStream_t stream);

// params: [count]; history: the token ids they index. For each penalised request i:
// penalised[i·vocab, (i+1)·vocab) = its penalised row, stats[i].penalised_{max,argmax}
// and results[i].penalised_overflow. counts: [count·vocab] int32, all zero before and
// after (the kernel restores the zeros it counts on).
cudaError_t LaunchSamplingPenalties(const float* logits, int64_t vocab,
                                    const SamplingDrawParams* params, int32_t count,
                                    const int32_t* history, float* penalised,
                                    int32_t* counts, SamplingRowStats* stats,
                                    SamplingResult* results, cudaStream_t stream);

// After the two above on the same stream: results[i].{token, logprob} for each request
// whose row is finite (flags clear), and lost_selection.
cudaError_t LaunchSamplingDraw(const float* logits, int64_t vocab,
                               const SamplingDrawParams* params, int32_t count,
                               const float* penalised, const SamplingRowStats* stats,
                               SamplingResult* results, cudaStream_t stream);

}  // namespace tpserve

#endif  // TPSERVE_WORKER_KERNELS_CUDA_SAMPLING_H_
