// The three sampling kernels of sampling.h, one CTA of kThreads per request. The CPU
// sampler (worker/sampling/sampler.cc) is the reference; the step numbers are worker/sampling/sampler.h's.
#include "worker/kernels/cuda/sampling.h"

#include <cmath>

#include "worker/kernels/cuda/launch.cuh"
#include "worker/kernels/cuda/sampling_block.cuh"
#include "worker/kernels/cuda/sampling_select.cuh"

namespace tpserve {
namespace sampling {
namespace {

// ---- Kernel 1: raw logprobs. ------------------------------------------------------------

// Thread 0: the gathered top-n ordered (key desc, id asc) into the result.
__device__ void WriteTop(const float* row, float log_norm, const uint32_t* keys,
                         const int32_t* ids, int n, SamplingResult& out) {
  int order[kSamplingMaxTopN];
  for (int i = 0; i < n; ++i) {
    int j = i;
    for (; j > 0; --j) {
      const int prev = order[j - 1];
      const bool before = keys[i] > keys[prev] || (keys[i] == keys[prev] && ids[i] < ids[prev]);
      if (!before) break;
      order[j] = prev;
    }
    order[j] = i;
  }
  for (int i = 0; i < n; ++i) {
    const int32_t id = ids[order[i]];
    out.top[i] = {id, row[id] - log_norm};
  }
  out.top_count = n;
}

// The top_n largest logits (key desc, id asc) into out.top, by selecting the n-th and
// gathering everything before it.
__device__ void TopLogprobs(const RowItems& items, int top_n, float log_norm,
                            SelectShared& sh, SamplingResult& out) {
  __shared__ uint32_t keys[kSamplingMaxTopN];
  __shared__ int32_t ids[kSamplingMaxTopN];
  __shared__ int gathered;
  TPSERVE_SHARED_POISON(keys);
  TPSERVE_SHARED_POISON(ids);
  TPSERVE_SHARED_POISON(gathered);
  const Selected nth = Select(items, CountAtLeast(top_n), sh);
  if (!nth.found) {
    if (threadIdx.x == 0) out.top_count = 0;
    return;
  }
  const int32_t last = SelectedId(items, nth, sh);  // ties up to it are in
  if (threadIdx.x == 0) gathered = 0;
  __syncthreads();
  ForEachLogit(items.row, items.n, [&](int i, float l) {
    const uint32_t key = LogitKey(l);
    if (key > nth.key || (key == nth.key && i <= last)) {
      const int slot = atomicAdd(&gathered, 1);
      if (slot < kSamplingMaxTopN) keys[slot] = key, ids[slot] = i;
    }
  });
  __syncthreads();
  if (threadIdx.x == 0) {
    WriteTop(items.row, log_norm, keys, ids, min(gathered, kSamplingMaxTopN), out);
  }
}

__global__ void __launch_bounds__(kThreads)
    LogprobsKernel(const float* __restrict__ logits, int vocab,
                   const SamplingLogprobRow* __restrict__ rows, SamplingRowStats* stats,
                   SamplingResult* results) {
  __shared__ SelectShared sh;
  TPSERVE_SHARED_POISON(sh);
  const SamplingLogprobRow q = rows[blockIdx.x];
  const float* row = logits + q.row * vocab;
  SamplingResult& out = results[blockIdx.x];
  const int top_n = max(0, min(min(q.top_n, kSamplingMaxTopN), vocab));
  const RowItems items{row, vocab, 0.0f, 1.0f, /*by_logit=*/true, /*weighted=*/false};
  // One pass: argmax, a per-thread online Σ exp(l − running max), the non-finite check,
  // and the top-n's level-1 histogram.
  u64 best = 0;
  float thread_max = -INFINITY;
  double thread_sum = 0;
  uint32_t bad = 0;
  BuildLevel1(items, top_n > 0, sh, [&](int i, float l, const Item&) {
    if (!(l < INFINITY)) {  // NaN or +inf
      bad = 1;
      return;
    }
    best = max(best, ArgmaxKey(l, i));
    if (l > thread_max) {
      thread_sum = thread_max == -INFINITY
                       ? 0.0
                       : thread_sum * exp(static_cast<double>(thread_max) - l);
      thread_max = l;
    }
    if (l != -INFINITY) thread_sum += expf(l - thread_max);
  });
  best = BlockReduce(best, Max());
  bad = BlockReduce(bad, Max());
  const float row_max = ArgmaxLogit(best);
  const double sum = BlockReduce(
      thread_sum > 0 ? thread_sum * exp(static_cast<double>(thread_max) - row_max) : 0.0,
      Sum());
  const bool not_finite = bad != 0 || !(row_max > -INFINITY);
  const float log_norm = __fadd_rn(row_max, static_cast<float>(log(sum)));
  if (threadIdx.x == 0) {
    stats[blockIdx.x] = {row_max, ArgmaxId(best), log_norm, 0.0f, 0, 0};
    out.not_finite = not_finite;
    out.penalised_overflow = 0;
    out.lost_selection = 0;
    if (q.token >= 0 && q.token < vocab) {
      out.token = q.token;
      out.logprob = row[q.token] - log_norm;
    }
  }
  if (top_n > 0) {
    TopLogprobs(items, top_n, log_norm, sh, out);
  } else if (threadIdx.x == 0) {
    out.top_count = 0;
  }
}

// ---- Kernel 2: penalties. ---------------------------------------------------------------

// Steps 1 and 2 for one logit, rounded exactly as RepetitionPenalised and
// PresenceFrequencyPenalty of worker/sampling/sampling_rules.h (the test checks bit equality).
__device__ __forceinline__ float RepetitionPenalised(float l, float penalty) {
  return l > 0 ? __fdiv_rn(l, penalty) : __fmul_rn(l, penalty);
}
__device__ __forceinline__ float PresenceFrequencyPenalty(float presence, float frequency,
                                                          int32_t count) {
  return __fmaf_rn(frequency, __int2float_rn(count), presence);
}

__global__ void __launch_bounds__(kThreads)
    PenaltiesKernel(const float* __restrict__ logits, int vocab,
                    const SamplingDrawParams* __restrict__ params,
                    const int32_t* __restrict__ history, float* penalised, int32_t* counts,
                    SamplingRowStats* stats, SamplingResult* results) {
  const SamplingDrawParams p = params[blockIdx.x];
  if (!p.penalised) return;
  const float* src = logits + p.row * vocab;
  float* dst = penalised + static_cast<int64_t>(blockIdx.x) * vocab;
  int32_t* count = counts + static_cast<int64_t>(blockIdx.x) * vocab;
  ForEachLogit(src, vocab, [&](int i, float l) { dst[i] = l; });
  __syncthreads();
  // Step 1 from the raw logit, so a token repeated in the history is written the same
  // value again instead of being penalised twice.
  if (p.repetition_penalty != 1.0f) {
    for (int64_t h = p.history_begin + threadIdx.x; h < p.history_end; h += kThreads) {
      const int32_t t = history[h];
      dst[t] = RepetitionPenalised(src[t], p.repetition_penalty);
    }
    __syncthreads();
  }
  // Step 2: count the output tokens, then the thread that takes a token's count (and
  // resets it to zero for the next call) subtracts its penalty.
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    for (int64_t h = p.output_begin + threadIdx.x; h < p.history_end; h += kThreads) {
      atomicAdd(&count[history[h]], 1);
    }
    __syncthreads();
    for (int64_t h = p.output_begin + threadIdx.x; h < p.history_end; h += kThreads) {
      const int32_t t = history[h];
      const int32_t c = atomicExch(&count[t], 0);
      if (c > 0) {
        dst[t] = __fsub_rn(dst[t],
                           PresenceFrequencyPenalty(p.presence_penalty, p.frequency_penalty, c));
      }
    }
    __syncthreads();
  }
  u64 best = 0;
  ForEachLogit(dst, vocab, [&](int i, float l) { best = max(best, ArgmaxKey(l, i)); });
  best = BlockReduce(best, Max());
  if (threadIdx.x == 0) {
    const float penalised_max = ArgmaxLogit(best);
    stats[blockIdx.x].penalised_max = penalised_max;
    stats[blockIdx.x].penalised_argmax = ArgmaxId(best);
    results[blockIdx.x].penalised_overflow = !isfinite(penalised_max);
  }
}

// ---- Kernel 3: the draw. ------------------------------------------------------------------

// Steps 4–7 with top-k or top-p: positions in the (weight desc, id asc) walk — by logit
// when top-k truncates, as the CPU's TopIds(logits) — found by Select. Returns −1 if a
// selection that must exist was not found.
__device__ int32_t DrawSorted(const float* row, int n, float row_max,
                              const SamplingDrawParams& p, SelectShared& sh) {
  const bool by_logit = p.top_k > 0;
  const RowItems items{row, n, row_max, p.scale, by_logit, /*weighted=*/true};
  // Weights are non-increasing along the walk, so min_p keeps a prefix: the elements
  // with weight ≥ min_p (at least the first, whose weight is 1).
  uint32_t above_min_p = 0;
  u64 above_min_p_mass = 0;
  BuildLevel1(items, true, sh, [&](int, float, const Item& it) {
    if (it.weight >= p.min_p) ++above_min_p, above_min_p_mass += it.mass;
  });
  Prefix kept{max(1u, BlockReduce(above_min_p, Sum())), BlockReduce(above_min_p_mass, Sum())};
  u64 total = 0;
  for (int b = threadIdx.x; b < kLevel1Bins; b += kThreads) total += sh.level1.mass[b];
  total = BlockReduce(total, Sum());
  // Step 4: the top-k's mass is what top_p is a fraction of.
  const uint32_t k = by_logit ? p.top_k : n;
  u64 mass_k = total;
  if (by_logit && (p.top_p < 1.0f || k < kept.count)) {
    const Selected kth = Select(items, CountAtLeast(k), sh);
    if (!kth.found) return -1;
    mass_k = kth.Through().mass;
    if (k < kept.count) kept = kth.Through();
  }
  // Step 5: the shortest prefix whose mass is ≥ top_p · mass_k.
  if (p.top_p < 1.0f) {
    const Selected cut =
        Select(items, MassAtLeast(static_cast<double>(p.top_p) * static_cast<double>(mass_k)), sh);
    if (!cut.found) return -1;
    if (cut.Through().count < kept.count) kept = cut.Through();
  }
  // Step 7: the first kept element whose running mass passes u · kept mass, or the last
  // kept one when rounding leaves that unreached.
  Selected pick = Select(items, MassAbove(p.u * static_cast<double>(kept.mass)), sh);
  if (!pick.found || pick.Through().count > kept.count) {
    pick = Select(items, CountAtLeast(kept.count), sh);
    if (!pick.found) return -1;
  }
  return SelectedId(items, pick, sh);
}

// Steps 6–7 without top-k or top-p: the walk is in id order. Each warp sums the kept
// mass of its contiguous segment; the warp whose segment passes u · total finds the
// element 32 ids at a time.
__device__ int32_t DrawInIdOrder(const float* row, int n, float row_max,
                                 const SamplingDrawParams& p, SelectShared& sh) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const Segment seg = WarpSegment(n, warp);
  const auto kept_mass = [&](float l) -> u64 {
    const float w = Weight(l, row_max, p.scale);
    return w >= p.min_p ? Fixed(w) : 0;
  };
  u64 mass = 0;
  int32_t last = -1;  // the segment's last id with mass
  ForEachInSegment(row, seg, [&](int i, float l) {
    const u64 m = kept_mass(l);
    mass += m;
    if (m != 0) last = i;
  });
  mass = WarpReduce(mass, Sum());
  last = WarpReduce(last, Max());
  __syncthreads();
  if (lane == 0) sh.seg_mass[warp] = mass, sh.seg_last[warp] = last;
  if (threadIdx.x == 0) sh.found_id = -1;
  __syncthreads();
  u64 total = 0;
  for (int w = 0; w < kWarps; ++w) total += sh.seg_mass[w];
  const double target = p.u * static_cast<double>(total);
  int owner = -1;
  u64 base = 0;
  for (int w = 0; w < kWarps && owner < 0; ++w) {
    if (static_cast<double>(base + sh.seg_mass[w]) > target) {
      owner = w;
    } else {
      base += sh.seg_mass[w];
    }
  }
  if (owner < 0) {  // rounding left u · total unreached: the last kept token
    for (int w = 0; w < kWarps; ++w) last = max(last, sh.seg_last[w]);
    return last;
  }
  if (warp == owner) {
    for (int chunk = seg.begin; chunk < seg.end; chunk += 32) {
      const int i = chunk + lane;
      const u64 incl = WarpInclusiveSum(i < seg.end ? kept_mass(row[i]) : u64{0});
      const unsigned passed = __ballot_sync(kFullMask, static_cast<double>(base + incl) > target);
      if (passed != 0) {
        if (lane == 0) sh.found_id = chunk + __ffs(passed) - 1;
        break;
      }
      base += __shfl_sync(kFullMask, incl, 31);
    }
  }
  __syncthreads();
  return sh.found_id;
}

__global__ void __launch_bounds__(kThreads)
    DrawKernel(const float* __restrict__ logits, int vocab,
               const SamplingDrawParams* __restrict__ params, const float* penalised,
               const SamplingRowStats* stats, SamplingResult* results) {
  __shared__ SelectShared sh;
  TPSERVE_SHARED_POISON(sh);
  const SamplingDrawParams p = params[blockIdx.x];
  SamplingResult& out = results[blockIdx.x];
  if (out.not_finite || out.penalised_overflow) return;  // the call fails for this row
  const SamplingRowStats st = stats[blockIdx.x];
  const float* row =
      p.penalised ? penalised + static_cast<int64_t>(blockIdx.x) * vocab : logits + p.row * vocab;
  const float row_max = p.penalised ? st.penalised_max : st.max;
  int32_t token;
  if (p.greedy) {
    token = p.penalised ? st.penalised_argmax : st.argmax;
  } else if (p.top_k > 0 || p.top_p < 1.0f) {
    token = DrawSorted(row, vocab, row_max, p, sh);
  } else {
    token = DrawInIdOrder(row, vocab, row_max, p, sh);
  }
  if (threadIdx.x == 0) {
    if (token < 0 || token >= vocab) {
      out.lost_selection = 1;
      token = 0;
    }
    out.token = token;
    out.logprob = logits[p.row * vocab + token] - st.log_norm;
  }
}

bool BadVocab(int64_t vocab) { return vocab < 1 || vocab > kSamplingMaxVocab; }

}  // namespace
}  // namespace sampling

cudaError_t LaunchSamplingLogprobs(const float* logits, int64_t vocab,
                                   const SamplingLogprobRow* rows, int32_t count,
                                   SamplingRowStats* stats, SamplingResult* results,
                                   cudaStream_t stream) {
  if (sampling::BadVocab(vocab) || count < 0) return cudaErrorInvalidValue;
  if (count == 0) return cudaSuccess;
  return LaunchKernel(sampling::LogprobsKernel, count, sampling::kThreads, 0, stream, logits,
                      static_cast<int>(vocab), rows, stats, results);
}

cudaError_t LaunchSamplingPenalties(const float* logits, int64_t vocab,
                                    const SamplingDrawParams* params, int32_t count,
                                    const int32_t* history, float* penalised,
                                    int32_t* counts, SamplingRowStats* stats,
                                    SamplingResult* results, cudaStream_t stream) {
  if (sampling::BadVocab(vocab) || count < 0) return cudaErrorInvalidValue;
  if (count == 0) return cudaSuccess;
  return LaunchKernel(sampling::PenaltiesKernel, count, sampling::kThreads, 0, stream, logits,
                      static_cast<int>(vocab), params, history, penalised, counts, stats, results);
}

cudaError_t LaunchSamplingDraw(const float* logits, int64_t vocab,
                               const SamplingDrawParams* params, int32_t count,
                               const float* penalised, const SamplingRowStats* stats,
                               SamplingResult* results, cudaStream_t stream) {
  if (sampling::BadVocab(vocab) || count < 0) return cudaErrorInvalidValue;
  if (count == 0) return cudaSuccess;
  return LaunchKernel(sampling::DrawKernel, count, sampling::kThreads, 0, stream, logits,
                      static_cast<int>(vocab), params, penalised, stats, results);
}

}  // namespace tpserve
