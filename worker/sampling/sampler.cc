#include "worker/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "worker/kernels/cpu/cpu_threads.h"
#include "worker/sampling/sampling_rules.h"

namespace tpserve {
namespace {

// ---- Vector math over a row (GCC/Clang vector extensions, 8 lanes). -------------------
// GCC 12 at -O2 does not vectorise an exp loop or a float reduction on its own, and a
// 150k-entry row is exp'd once or twice per sampled token.

using Float8 = float __attribute__((vector_size(32)));
using Int8 = int32_t __attribute__((vector_size(32)));

// exp(x) within 1e-7 relative (Cephes' expf polynomial); 0 below −87, NaN stays NaN.
Float8 Exp8(Float8 x) {
  const Float8 xc = x < -87.0f ? Float8{} - 87.0f : x;
  const float kRound = 12582912.0f;  // 1.5 · 2^23: adding it rounds to an integer
  const Float8 n = (xc * 1.44269504088896341f + kRound) - kRound;
  const Float8 r = (xc - n * 0.693359375f) - n * -2.12194440e-4f;
  Float8 p = r * 1.9875691500e-4f + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const Int8 two_n = ((__builtin_convertvector(n, Int8) + 127) << 23) & (x >= -87.0f);
  return p * (Float8)two_n;  // a vector cast reinterprets the bits
}

Float8 Load8(const float* p) {
  Float8 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

bool Any(Int8 mask) {
  uint64_t words[4];
  std::memcpy(words, &mask, sizeof(words));
  return (words[0] | words[1] | words[2] | words[3]) != 0;
}

// Largest entry; NaNs are skipped (ExpSum reports them).
float MaxOf(absl::Span<const float> x) {
  Float8 m = Float8{} - std::numeric_limits<float>::infinity();
  size_t i = 0;
  for (; i + 8 <= x.size(); i += 8) {
    const Float8 v = Load8(x.data() + i);
    m = v > m ? v : m;
  }
  float best = -std::numeric_limits<float>::infinity();
  for (int j = 0; j < 8; ++j) best = std::max(best, m[j]);
  for (; i < x.size(); ++i) best = std::max(best, x[i]);
  return best;
}

// Index of the first entry > `threshold` at or after `from`, or x.size().
size_t FirstAbove(absl::Span<const float> x, float threshold, size_t from) {
  size_t i = from;
  for (; i + 8 <= x.size() && !Any(Load8(x.data() + i) > threshold); i += 8) {
  }
  while (i < x.size() && !(x[i] > threshold)) ++i;
  return i;
}

// Σ exp((x[i] − shift) · scale) in double (a fixed lane order); each term also goes to
// out[i] unless `out` is null.
double ExpSum(absl::Span<const float> x, float shift, float scale, float* out) {
  using Double4 = double __attribute__((vector_size(32)));
  Double4 lo{}, hi{};
  size_t i = 0;
  for (; i + 8 <= x.size(); i += 8) {
    const Float8 e = Exp8((Load8(x.data() + i) - shift) * scale);
    if (out != nullptr) std::memcpy(out + i, &e, sizeof(e));
    lo += __builtin_convertvector(__builtin_shufflevector(e, e, 0, 1, 2, 3), Double4);
    hi += __builtin_convertvector(__builtin_shufflevector(e, e, 4, 5, 6, 7), Double4);
  }
  double sum = 0;
  for (; i < x.size(); ++i) {
    Float8 v{};
    v[0] = x[i];
    const float e = Exp8((v - shift) * scale)[0];
    if (out != nullptr) out[i] = e;
    sum += e;
  }
  const Double4 lanes = lo + hi;
  return sum + ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3]));
}

// ---- Selection. ----------------------------------------------------------------------

// Ids of the k largest scores, ordered (score desc, id asc). One pass with a buffer of 2k
// candidates, pruned to k whenever it fills, so small k never sorts the row.
std::vector<int32_t> TopIds(absl::Span<const float> scores, int64_t k) {
  k = std::min<int64_t>(k, scores.size());
  if (k <= 0) return {};
  const auto better = [&scores](int32_t a, int32_t b) {
    return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
  };
  std::vector<int32_t> ids;
  ids.reserve(std::min<int64_t>(2 * k, scores.size()));
  float threshold = -std::numeric_limits<float>::infinity();
  bool pruned = false;
  for (size_t i = 0; i < scores.size(); ++i) {
    // Later ids lose ties, so only a strictly larger score beats the k-th.
    if (pruned) {
      i = FirstAbove(scores, threshold, i);
      if (i == scores.size()) break;
    }
    ids.push_back(static_cast<int32_t>(i));
    if (static_cast<int64_t>(ids.size()) == 2 * k) {
      std::nth_element(ids.begin(), ids.begin() + (k - 1), ids.end(), better);
      ids.resize(k);
      threshold = scores[ids[k - 1]];
      pruned = true;
    }
  }
  const int64_t n = std::min<int64_t>(k, ids.size());
  std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), better);
  ids.resize(n);
  return ids;
}

// First index of the largest logit: greedy, ties to the lowest id.
int32_t Argmax(absl::Span<const float> logits) {
  const float max = MaxOf(logits);
  const size_t first = FirstAbove(logits, std::nextafter(max, -INFINITY), 0);
  return first < logits.size() ? static_cast<int32_t>(first) : 0;
}

// ---- Per-request pieces. ---------------------------------------------------------------

// Steps 1 and 2 of the header, in place. Token ids were checked against the row size.
void ApplyPenalties(const SamplingParams& p, const SampleRequest& r,
                    absl::Span<float> logits) {
  if (p.repetition_penalty != 1.0f) {
    std::vector<bool> seen(logits.size());
    for (absl::Span<const int32_t> part : {r.prompt_tokens, r.output_tokens}) {
      for (int32_t t : part) {
        if (seen[t]) continue;
        seen[t] = true;
        logits[t] = RepetitionPenalised(logits[t], p.repetition_penalty);
      }
    }
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    absl::flat_hash_map<int32_t, int32_t> counts;
    for (int32_t t : r.output_tokens) ++counts[t];
    for (const auto& [t, c] : counts) {
      logits[t] -= PresenceFrequencyPenalty(p.presence_penalty, p.frequency_penalty, c);
    }
  }
}

// Scratch buffers of one SampleBatch call, each [vocab_size] once used. Reused across
// requests; nothing read from them survives a request.
struct Scratch {
  std::vector<float> weights;
  std::vector<float> logits;
};

// log Σ exp(row): the raw logprob of token t is row[t] − LogNormaliser(row).
absl::StatusOr<float> LogNormaliser(absl::Span<const float> row) {
  const float max = MaxOf(row);
  const double sum = ExpSum(row, max, 1.0f, /*out=*/nullptr);
  if (!std::isfinite(max) || !std::isfinite(sum) || sum <= 0) {
    return RowNotFiniteError();
  }
  return max + static_cast<float>(std::log(sum));
}

SampleResult Score(absl::Span<const float> row, float log_norm, int32_t token, int top_n) {
  SampleResult result{token, row[token] - log_norm, {}};
  for (int32_t id : TopIds(row, top_n)) result.top.push_back({id, row[id] - log_norm});
  return result;
}

// Where top_p and min_p cut `sorted` (ids by weight desc, id asc; weights relative to the
// largest, which is 1). `mass` is the candidates' total and `complete` says whether
// `sorted` holds them all. Returns {kept count, kept mass}, or {-1, 0} when `sorted` is
// too short to decide.
std::pair<int64_t, double> Cutoff(absl::Span<const int32_t> sorted, const float* w,
                                  double mass, bool complete, const SamplingParams& p) {
  double cum = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const float wi = w[sorted[i]];
    if (i > 0 && wi < p.min_p) return {i, cum};
    cum += wi;
    if (p.top_p < 1.0f && cum >= static_cast<double>(p.top_p) * mass) return {i + 1, cum};
  }
  if (complete) return {static_cast<int64_t>(sorted.size()), cum};
  return {-1, 0.0};
}

// Step 7 over kept ids in walking order: the first whose cumulative weight exceeds
// `target`. Rounding can leave `target` unreached; the last kept token is taken then.
int32_t PickByMass(absl::Span<const int32_t> kept, const float* w, double target) {
  double cum = 0;
  for (int32_t id : kept) {
    cum += w[id];
    if (cum > target) return id;
  }
  return kept.back();
}

// Step 7 without top-k or top-p: walks `w` in id order (no sort), skipping what min_p
// drops. `mass` is Σ w.
int32_t PickInIdOrder(absl::Span<const float> w, float min_p, double mass, double u) {
  if (min_p > 0) {
    mass = 0;
    for (float wi : w) mass += wi >= min_p ? wi : 0.0f;
  }
  double cum = 0;
  int32_t last = 0;  // the walk always passes the largest weight, 1
  for (int32_t i = 0; i < static_cast<int32_t>(w.size()); ++i) {
    if (w[i] < min_p || w[i] == 0.0f) continue;
    last = i;
    cum += w[i];
    if (cum > u * mass) return i;
  }
  return last;
}

// Steps 4–7 for T > 0 on penalised logits.
int32_t SampleTemperature(absl::Span<const float> logits, const SamplingParams& p,
                          double u, Scratch& scratch) {
  const int64_t vocab = logits.size();
  const float max = MaxOf(logits);
  scratch.weights.resize(vocab);
  float* w = scratch.weights.data();
  const float scale = 1.0f / p.temperature;
  if (p.top_k > 0 && p.top_k < vocab) {
    const std::vector<int32_t> top = TopIds(logits, p.top_k);
    double mass = 0;
    for (int32_t id : top) mass += (w[id] = std::exp((logits[id] - max) * scale));
    const auto [kept, kept_mass] = Cutoff(top, w, mass, /*complete=*/true, p);
    return PickByMass(absl::MakeConstSpan(top).first(kept), w, u * kept_mass);
  }
  const double mass = ExpSum(logits, max, scale, w);
  if (p.top_p < 1.0f) {
    // Grow a sorted prefix until it holds the top-p cut: LLM mass sits in few tokens.
    for (int64_t k = 64;; k = std::min(16 * k, vocab)) {
      const std::vector<int32_t> top = TopIds(absl::MakeConstSpan(w, vocab), k);
      const auto [kept, kept_mass] = Cutoff(top, w, mass, k >= vocab, p);
      if (kept >= 0) return PickByMass(absl::MakeConstSpan(top).first(kept), w, u * kept_mass);
    }
  }
  return PickInIdOrder(absl::MakeConstSpan(w, vocab), p.min_p, mass, u);
}

absl::StatusOr<SampleResult> SampleOne(absl::Span<const float> row, const SampleRequest& r,
                                       Scratch& scratch) {
  TPSERVE_ASSIGN_OR_RETURN(const float log_norm, LogNormaliser(row));
  const SamplingParams& p = r.params;
  absl::Span<const float> logits = row;
  if (HasPenalties(p)) {
    scratch.logits.assign(row.begin(), row.end());
    ApplyPenalties(p, r, absl::MakeSpan(scratch.logits));
    logits = scratch.logits;
    if (!std::isfinite(MaxOf(logits))) return PenalisedOverflowError();
  }
  // Greedy also when 1/T overflows, where (l − max)/T would give 0·inf.
  const int32_t token =
      IsGreedy(p) ? Argmax(logits)
                  : SampleTemperature(logits, p, StepUniform(*p.seed, r.output_tokens.size()),
                                      scratch);
  return Score(row, log_norm, token, p.logprobs);
}

absl::StatusOr<int64_t> VocabSize(const Tensor& logits) {
  if (logits.rank() != 2 || logits.dim(1) <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "logits must be [rows, vocab_size], got ", ShapeToString(logits.shape())));
  }
  return logits.dim(1);
}

}  // namespace

absl::StatusOr<std::vector<SampleResult>> SampleBatch(
    const Tensor& logits, absl::Span<const SampleRequest> requests) {
  TPSERVE_ASSIGN_OR_RETURN(const int64_t vocab, VocabSize(logits));
  const int64_t rows = logits.dim(0);
  for (size_t i = 0; i < requests.size(); ++i) {
    if (absl::Status s = CheckSampleRequest(requests[i], rows, vocab); !s.ok()) {
      return ForRequest(i, s);
    }
  }
  // Requests split between the rank's compute threads: each draws from its own seed and
  // step, so its result is the same on any thread.
  std::vector<SampleResult> results(requests.size());
  ParallelEach(static_cast<int64_t>(requests.size()), [&](int64_t i) {
    thread_local Scratch scratch;
    const SampleRequest& r = requests[i];
    absl::StatusOr<SampleResult> result =
        SampleOne(absl::MakeConstSpan(logits.row(r.row), vocab), r, scratch);
    // A failure here is this request's own: the others go on.
    results[i] = result.ok() ? *std::move(result) : SampleResult::Failed(result.status());
  });
  return results;
}

absl::StatusOr<std::vector<SampleResult>> PromptLogprobs(
    const Tensor& logits, int64_t first_row, absl::Span<const int32_t> next_tokens,
    int top_n) {
  TPSERVE_ASSIGN_OR_RETURN(const int64_t vocab, VocabSize(logits));
  if (absl::Status s = CheckPromptLogprobs(logits.dim(0), first_row, next_tokens, top_n, vocab);
      !s.ok()) {
    return s;
  }
  const int64_t count = next_tokens.size();
  std::vector<SampleResult> results;
  results.reserve(count);
  for (int64_t i = 0; i < count; ++i) {
    const absl::Span<const float> row(logits.row(first_row + i), vocab);
    const absl::StatusOr<float> log_norm = LogNormaliser(row);
    if (!log_norm.ok()) return ForRow(first_row + i, log_norm.status());
    results.push_back(Score(row, *log_norm, next_tokens[i], top_n));
  }
  return results;
}

}  // namespace tpserve
