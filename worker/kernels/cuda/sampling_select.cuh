// Radix selection over one row for the sampling kernels (sampling.cu), with no sort.
//
// A row's elements are walked, conceptually, in (key desc, id asc) order, where the key
// is the logit's or the weight's order-preserving bits. Select finds the element at
// which a monotone criterion on the walk's running (count, mass) first holds — "the
// k-th", "mass reaches top_p · total", "mass passes u · kept" — by narrowing the key
// 10 + 11 + 11 bits at a time with histograms of (count, mass), then ranking the tied
// elements (equal keys have equal masses) by id. The first level's histogram is built
// once per row (BuildLevel1) and shared by every Select on that row; each Select then
// reads the row twice more, and a tie beyond the first once or twice more.
// Block-uniform like sampling_block.cuh: all threads call with the same arguments.
#ifndef TPSERVE_WORKER_KERNELS_CUDA_SAMPLING_SELECT_CUH_
#define TPSERVE_WORKER_KERNELS_CUDA_SAMPLING_SELECT_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "worker/kernels/cuda/sampling_block.cuh"

namespace tpserve {
namespace sampling {

constexpr int kLevel1Shift = 22;  // level 1: key bits 31..22
constexpr int kLevel2Shift = 11;  // level 2: bits 21..11; level 3: bits 10..0
constexpr int kLevel1Bins = 1 << (32 - kLevel1Shift);
constexpr int kWorkBins = 1 << kLevel2Shift;

// The walk's running totals: elements passed and their fixed-point mass.
struct Prefix {
  uint32_t count;
  u64 mass;
};

enum class Until : int { kCountAtLeast, kMassAtLeast, kMassAbove };

// A predicate on the running totals that, once true, stays true along the walk.
struct Criterion {
  Until until;
  uint32_t count;
  double mass;

  __device__ bool Holds(uint32_t c, u64 m) const {
    switch (until) {
      case Until::kCountAtLeast:
        return c >= count;
      case Until::kMassAtLeast:
        return static_cast<double>(m) >= mass;
      default:
        return static_cast<double>(m) > mass;
    }
  }
};
__device__ inline Criterion CountAtLeast(uint32_t n) { return {Until::kCountAtLeast, n, 0.0}; }
__device__ inline Criterion MassAtLeast(double m) { return {Until::kMassAtLeast, 0, m}; }
__device__ inline Criterion MassAbove(double m) { return {Until::kMassAbove, 0, m}; }

struct Item {
  uint32_t key;
  float weight;
  u64 mass;
};

// How a row's logits become selection items.
struct RowItems {
  const float* row;  // [n]
  int n;
  float max;    // the row's max (weighted only)
  float scale;  // 1 / temperature (weighted only)
  bool by_logit;  // key: the logit's (top-k order); else the weight's bits (top-p order)
  bool weighted;  // mass: Fixed(weight); else 0, and the key must be by logit

  __device__ uint32_t Key(float l) const {
    return by_logit ? LogitKey(l) : __float_as_uint(Weight(l, max, scale));
  }
  __device__ u64 Mass(float l) const { return weighted ? Fixed(Weight(l, max, scale)) : 0; }
  __device__ Item At(float l) const {
    if (!weighted) return {LogitKey(l), 0.0f, 0};
    const float w = Weight(l, max, scale);
    return {by_logit ? LogitKey(l) : __float_as_uint(w), w, Fixed(w)};
  }
};

struct Level1Histogram {
  uint32_t count[kLevel1Bins];
  u64 mass[kLevel1Bins];
};
struct WorkHistogram {
  uint32_t count[kWorkBins];
  u64 mass[kWorkBins];
  uint32_t min_id[kWorkBins];
};

// Shared memory of one row's selections (~45 KB).
struct SelectShared {
  Level1Histogram level1;
  WorkHistogram work;
  Prefix scan_above;
  int scan_bin;
  int32_t found_id;
  uint32_t seg_count[kWarps];
  u64 seg_mass[kWarps];
  int32_t seg_last[kWarps];
};

// A thread's run of consecutive items in one bin, added with one atomic per run: a
// masked or flat stretch of the row costs one atomic per thread, not per element.
struct BinRun {
  int bin = -1;
  uint32_t count = 0;
  u64 mass = 0;
  uint32_t first_id = 0;  // the run's lowest id: each thread's ids increase

  template <typename Histogram>
  __device__ void Add(Histogram& h, int b, u64 m, int id) {
    if (b != bin) {
      Flush(h);
      bin = b, count = 0, mass = 0, first_id = id;
    }
    ++count;
    mass += m;
  }
  __device__ void Flush(Level1Histogram& h) const {
    if (bin < 0) return;
    atomicAdd(&h.count[bin], count);
    if (mass != 0) atomicAdd(&h.mass[bin], mass);
  }
  __device__ void Flush(WorkHistogram& h) const {
    if (bin < 0) return;
    atomicAdd(&h.count[bin], count);
    if (mass != 0) atomicAdd(&h.mass[bin], mass);
    atomicMin(&h.min_id[bin], first_id);
  }
};

// One pass over the row: extra(i, l, item) for every element and, when `histogram`,
// the level-1 histogram of the keys.
template <typename Extra>
__device__ void BuildLevel1(const RowItems& items, bool histogram, SelectShared& sh,
                            Extra&& extra) {
  __syncthreads();
  for (int b = threadIdx.x; b < kLevel1Bins; b += kThreads) {
    sh.level1.count[b] = 0;
    sh.level1.mass[b] = 0;
  }
  __syncthreads();
  BinRun run;
  ForEachLogit(items.row, items.n, [&](int i, float l) {
    const Item it = items.At(l);
    extra(i, l, it);
    if (histogram) run.Add(sh.level1, it.key >> kLevel1Shift, it.mass, i);
  });
  run.Flush(sh.level1);
  __syncthreads();
}

// Walks bins from the highest down, 32 at a time, and leaves in sh.scan_bin the first
// bin at which `c` holds (−1 if none) and in sh.scan_above the totals before it.
template <int kBins>
__device__ void ScanBins(const uint32_t* count, const u64* mass, Prefix base,
                         const Criterion& c, SelectShared& sh) {
  static_assert(kBins % 32 == 0, "whole warps of bins");
  __syncthreads();  // the histogram is complete
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    bool found = false;
    for (int top = kBins - 1; top >= 0 && !found; top -= 32) {
      const int b = top - lane;
      const uint32_t ic = WarpInclusiveSum(count[b]);
      const u64 im = WarpInclusiveSum(mass[b]);
      const unsigned holds = __ballot_sync(kFullMask, c.Holds(base.count + ic, base.mass + im));
      if (holds != 0) {
        found = true;
        if (lane == __ffs(holds) - 1) {
          sh.scan_bin = b;
          sh.scan_above = {base.count + ic - count[b], base.mass + im - mass[b]};
        }
      } else {
        base.count += __shfl_sync(kFullMask, ic, 31);
        base.mass += __shfl_sync(kFullMask, im, 31);
      }
    }
    if (!found && lane == 0) sh.scan_bin = -1;
  }
  __syncthreads();
}

// The work histogram of the keys whose bits above `match_shift` equal `match`, binned
// by the kLevel2Shift bits at `digit_shift`.
__device__ void CountLevel(const RowItems& items, int match_shift, uint32_t match,
                           int digit_shift, SelectShared& sh) {
  __syncthreads();  // readers of the previous work histogram are done
  for (int b = threadIdx.x; b < kWorkBins; b += kThreads) {
    sh.work.count[b] = 0;
    sh.work.mass[b] = 0;
    sh.work.min_id[b] = 0xffffffffu;
  }
  __syncthreads();
  BinRun run;
  ForEachLogit(items.row, items.n, [&](int i, float l) {
    const uint32_t key = items.Key(l);
    if ((key >> match_shift) == match) {
      run.Add(sh.work, (key >> digit_shift) & (kWorkBins - 1), items.Mass(l), i);
    }
  });
  run.Flush(sh.work);
}

// The element at which a criterion first holds.
struct Selected {
  bool found;
  uint32_t key;
  Prefix above;     // totals of the elements before its tie group
  uint32_t ties;    // elements with this key
  u64 tie_mass;     // the mass of each
  uint32_t rank;    // its place among them, in id order
  uint32_t min_id;  // the tie group's lowest id

  // Totals through this element.
  __device__ Prefix Through() const {
    return {above.count + rank + 1, above.mass + u64{rank + 1} * tie_mass};
  }
};

__device__ Selected Select(const RowItems& items, const Criterion& c, SelectShared& sh) {
  Selected s{};
  s.found = false;
  ScanBins<kLevel1Bins>(sh.level1.count, sh.level1.mass, Prefix{0, 0}, c, sh);
  const int bin1 = sh.scan_bin;
  if (bin1 < 0) return s;
  CountLevel(items, kLevel1Shift, bin1, kLevel2Shift, sh);
  ScanBins<kWorkBins>(sh.work.count, sh.work.mass, sh.scan_above, c, sh);
  const int bin2 = sh.scan_bin;
  if (bin2 < 0) return s;
  const uint32_t high = (static_cast<uint32_t>(bin1) << (kLevel1Shift - kLevel2Shift)) | bin2;
  CountLevel(items, kLevel2Shift, high, 0, sh);
  ScanBins<kWorkBins>(sh.work.count, sh.work.mass, sh.scan_above, c, sh);
  const int bin3 = sh.scan_bin;
  if (bin3 < 0) return s;
  s.found = true;
  s.key = (high << kLevel2Shift) | bin3;
  s.above = sh.scan_above;
  s.ties = sh.work.count[bin3];
  s.tie_mass = sh.work.mass[bin3] / s.ties;
  s.min_id = sh.work.min_id[bin3];
  // The first tie at which c holds; it holds at the last (the bin's total).
  uint32_t lo = 0, hi = s.ties - 1;
  while (lo < hi) {
    const uint32_t mid = (lo + hi) / 2;
    const bool holds =
        c.Holds(s.above.count + mid + 1, s.above.mass + u64{mid + 1} * s.tie_mass);
    if (holds) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  s.rank = lo;
  return s;
}

// The id of the rank-th (from 0) element, in id order, whose key is `key`; −1 if none.
// Each warp counts the matches in its contiguous segment; the warp holding the rank-th
// finds it 32 ids at a time.
__device__ int32_t NthIdWithKey(const RowItems& items, uint32_t key, uint32_t rank,
                                SelectShared& sh) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const Segment seg = WarpSegment(items.n, warp);
  uint32_t count = 0;
  ForEachInSegment(items.row, seg, [&](int, float l) { count += items.Key(l) == key; });
  count = WarpReduce(count, Sum());
  __syncthreads();
  if (lane == 0) sh.seg_count[warp] = count;
  if (threadIdx.x == 0) sh.found_id = -1;
  __syncthreads();
  uint32_t before = 0;
  for (int w = 0; w < warp; ++w) before += sh.seg_count[w];
  if (rank >= before && rank - before < count) {  // warp-uniform
    uint32_t need = rank - before;
    for (int base = seg.begin; base < seg.end; base += 32) {
      const int i = base + lane;
      unsigned match = __ballot_sync(kFullMask, i < seg.end && items.Key(items.row[i]) == key);
      const uint32_t found = __popc(match);
      if (need < found) {
        for (uint32_t k = 0; k < need; ++k) match &= match - 1;
        if (lane == 0) sh.found_id = base + __ffs(match) - 1;
        break;
      }
      need -= found;
    }
  }
  __syncthreads();
  return sh.found_id;
}

// The id of a selected element.
__device__ int32_t SelectedId(const RowItems& items, const Selected& s, SelectShared& sh) {
  if (s.rank == 0) return static_cast<int32_t>(s.min_id);
  return NthIdWithKey(items, s.key, s.rank, sh);
}

}  // namespace sampling
}  // namespace tpserve

#endif  // TPSERVE_WORKER_KERNELS_CUDA_SAMPLING_SELECT_CUH_
