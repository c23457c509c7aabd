#include "worker/kernels/cpu/attention_avx2.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "worker/kernels/cpu/vec_math.h"

namespace tpserve {
namespace attention_avx2 {
namespace {

constexpr int64_t kScoresPerPass = 8;  // positions whose scores one pass over d yields
constexpr int kTileRows = 4;           // query rows per pass of P·V over a block

// Positions per block: the block's widened keys fit in 16 KiB of L1 (a multiple of 8).
int64_t BlockPositions(int64_t d) {
  return std::max<int64_t>(kScoresPerPass, 4096 / d / kScoresPerPass * kScoresPerPass);
}

// Lane l of the result: the sum of a[l]'s lanes, ((l0 + l1) + (l2 + l3)) + ((l4 + l5) +
// (l6 + l7)), whatever the other vectors hold.
inline __m256 SumLanesOfEach(const __m256 a[8]) {
  // t0: a0 01, a0 23, a1 01, a1 23 | a0 45, a0 67, a1 45, a1 67 (and so on)
  const __m256 t0 = _mm256_hadd_ps(a[0], a[1]);
  const __m256 t1 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 t2 = _mm256_hadd_ps(a[4], a[5]);
  const __m256 t3 = _mm256_hadd_ps(a[6], a[7]);
  // u0: a0 0-3, a1 0-3, a2 0-3, a3 0-3 | a0 4-7, a1 4-7, a2 4-7, a3 4-7
  const __m256 u0 = _mm256_hadd_ps(t0, t1);
  const __m256 u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20),
                       _mm256_permute2f128_ps(u0, u1, 0x31));
}

// scale · q·k[i] for the 8 key rows k[i] = k + i·d, lane i: each dot eight lane partial
// sums over d (lane l takes columns l, l + 8, ...), summed by SumLanesOfEach.
inline __m256 ScaledDots(const float* q, const float* k, int64_t d, __m256 scale) {
  __m256 acc[kScoresPerPass];
#pragma GCC unroll 8
  for (int i = 0; i < kScoresPerPass; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t c = 0; c < d; c += 8) {
    const __m256 qc = _mm256_loadu_ps(q + c);
#pragma GCC unroll 8
    for (int i = 0; i < kScoresPerPass; ++i) {
      acc[i] = _mm256_fmadd_ps(qc, _mm256_loadu_ps(k + i * d + c), acc[i]);
    }
  }
  return _mm256_mul_ps(SumLanesOfEach(acc), scale);
}

// o[r][c, c + 8W) += Σ_j p[r][j] · v[j][c, c + 8W) for j in [j0, j1) in order, one fused
// multiply-add a position (v: rows dv apart).
template <int R, int W>
void FoldValues(const float* const* p, const float* v, int64_t dv, int64_t c, int64_t j0,
                int64_t j1, float* const* o) {
  __m256 acc[R][W];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 2
    for (int w = 0; w < W; ++w) acc[r][w] = _mm256_loadu_ps(o[r] + c + 8 * w);
  }
  for (int64_t j = j0; j < j1; ++j) {
    __m256 vj[W];
#pragma GCC unroll 2
    for (int w = 0; w < W; ++w) vj[w] = _mm256_loadu_ps(v + j * dv + c + 8 * w);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256 pr = _mm256_broadcast_ss(p[r] + j);
#pragma GCC unroll 2
      for (int w = 0; w < W; ++w) acc[r][w] = _mm256_fmadd_ps(pr, vj[w], acc[r][w]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 2
    for (int w = 0; w < W; ++w) _mm256_storeu_ps(o[r] + c + 8 * w, acc[r][w]);
  }
}

template <int R>
void FoldTile(const float* const* p, const float* v, int64_t dv, int64_t j0, int64_t j1,
              float* const* o) {
  int64_t c = 0;
  for (; c + 16 <= dv; c += 16) FoldValues<R, 2>(p, v, dv, c, j0, j1, o);
  if (c < dv) FoldValues<R, 1>(p, v, dv, c, j0, j1, o);
}

void FoldRows(int rows, const float* const* p, const float* v, int64_t dv, int64_t j0,
              int64_t j1, float* const* o) {
  switch (rows) {
    case 1: return FoldTile<1>(p, v, dv, j0, j1, o);
    case 2: return FoldTile<2>(p, v, dv, j0, j1, o);
    case 3: return FoldTile<3>(p, v, dv, j0, j1, o);
    default: return FoldTile<4>(p, v, dv, j0, j1, o);
  }
}

// dst[0, width) = the bf16 src widened (exactly), 8 at a time (width a multiple of 8).
// Inlined: Bf16ToFloats (dtype.h), a call a row with a scalar tail, made the whole kernel
// 1.1x slower at decodes.
inline void WidenRow(const uint16_t* src, int64_t width, float* dst) {
  for (int64_t c = 0; c < width; c += 8) {
    const __m128i half = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + c));
    _mm256_storeu_ps(dst + c,
                     _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(half), 16)));
  }
}

}  // namespace

bool Available() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

bool Supports(const AttentionParams& p) {
  return p.head_dim > 0 && p.head_dim % 8 == 0 && p.v_head_dim > 0 && p.v_head_dim % 8 == 0;
}

void AttendHead(const float* q, const SequenceStep& seq, int64_t t0, int64_t kv_head,
                const KvCache& cache, int layer, const AttentionParams& p, float* out) {
  const int64_t group = p.num_heads / p.num_kv_heads;  // query heads per kv head
  const int64_t d = p.head_dim, dv = p.v_head_dim;
  const int block_size = cache.shape().block_size;
  const int64_t block = BlockPositions(d);
  const int64_t tokens_per_chunk = std::max<int64_t>(1, kRowsPerChunk / group);
  const int32_t first_pos = seq.context_len - seq.num_new_tokens;
  const __m256 scale = _mm256_set1_ps(p.scale);
  // Per thread, grown and kept: keys: [block + 8, d] (a pass of 8 past the block's last
  // row reads rows whose lanes it drops; zeroed once, so never uninitialised); values:
  // [block, dv]; scores: [rows, columns] of a chunk; the rows' windows, maxima, sums and
  // output rows.
  thread_local std::vector<float> keys, values, scores, row_max, row_sum;
  thread_local std::vector<int64_t> lo, hi;
  thread_local std::vector<float*> out_rows;
  if (static_cast<int64_t>(keys.size()) < (block + kScoresPerPass) * d) {
    keys.assign((block + kScoresPerPass) * d, 0.0f);
  }
  if (static_cast<int64_t>(values.size()) < block * dv) values.resize(block * dv);
  // Column c's key or value head in the cache (position base + c).
  auto row = [&](bool key, int32_t base, int64_t c) {
    const int64_t slot = seq.SlotOf(base + static_cast<int32_t>(c), block_size);
    return key ? cache.key_bf16(layer, slot) + kv_head * d
               : cache.value_bf16(layer, slot) + kv_head * dv;
  };
  // Columns [c0, c1) of the key or value heads widened into dst, [c1 - c0, width].
  auto widen = [&](bool key, int32_t base, int64_t c0, int64_t c1, float* dst) {
    const int64_t width = key ? d : dv;
    for (int64_t c = c0; c < c1; ++c) WidenRow(row(key, base, c), width, dst + (c - c0) * width);
  };
  for (int32_t i0 = 0; i0 < seq.num_new_tokens; i0 += tokens_per_chunk) {
    const int32_t i1 =
        static_cast<int32_t>(std::min<int64_t>(seq.num_new_tokens, i0 + tokens_per_chunk));
    const int64_t rows = int64_t{i1 - i0} * group;
    // Columns: positions [base, first_pos + i1), those the chunk's first token sees and on.
    const int32_t base =
        p.sliding_window > 0 ? std::max(0, first_pos + i0 - p.sliding_window + 1) : 0;
    const int64_t columns = first_pos + i1 - base;
    scores.resize(rows * columns);
    lo.resize(rows);
    hi.resize(rows);
    row_max.assign(rows, -INFINITY);
    row_sum.resize(rows);
    out_rows.resize(rows);
    for (int32_t i = i0; i < i1; ++i) {  // row (i, g): token i, query head kv_head·G + g
      const int32_t pos = first_pos + i;
      const int32_t first = p.sliding_window > 0 ? std::max(0, pos - p.sliding_window + 1) : 0;
      for (int64_t g = 0; g < group; ++g) {
        const int64_t r = (i - i0) * group + g;
        lo[r] = first - base;
        hi[r] = pos - base;
        out_rows[r] = out + ((t0 + i) * p.num_heads + kv_head * group + g) * dv;
        std::memset(out_rows[r], 0, dv * sizeof(float));
      }
    }
    // Scores of each row's window and their maximum, a block of keys at a time.
    for (int64_t b0 = 0; b0 < columns; b0 += block) {
      const int64_t b1 = std::min(columns, b0 + block);
      widen(true, base, b0, b1, keys.data());

      for (int64_t r = 0; r < rows; ++r) {
        const int64_t j0 = std::max(lo[r], b0), j1 = std::min(hi[r] + 1, b1);
        if (j0 >= j1) continue;
        const int64_t i = r / group, g = r % group;
        const float* q_row = q + ((t0 + i0 + i) * p.num_heads + kv_head * group + g) * d;
        float* s = &scores[r * columns];
        __m256 most = _mm256_set1_ps(-INFINITY);
        int64_t j = j0;
        for (; j + kScoresPerPass <= j1; j += kScoresPerPass) {
          const __m256 dots = ScaledDots(q_row, &keys[(j - b0) * d], d, scale);
          _mm256_storeu_ps(s + j, dots);
          most = _mm256_max_ps(most, dots);
        }
        if (j < j1) {
          alignas(32) float tail[kScoresPerPass];
          _mm256_store_ps(tail, ScaledDots(q_row, &keys[(j - b0) * d], d, scale));
          std::memcpy(s + j, tail, (j1 - j) * sizeof(float));
          for (int64_t t = 0; t < j1 - j; ++t) row_max[r] = std::max(row_max[r], tail[t]);
        }
        alignas(32) float lanes[8];
        _mm256_store_ps(lanes, most);
        for (float x : lanes) row_max[r] = std::max(row_max[r], x);
      }
    }
    // Each row's weights e^(s − max) over its window, +0 elsewhere, and their sum.
    for (int64_t r = 0; r < rows; ++r) {
      row_sum[r] = ExpWindow(&scores[r * columns], columns, lo[r], hi[r], row_max[r]);
    }
    // Outputs, a block of values at a time; a tile's rows over the union of their windows
    // (weights outside a row's own are +0). Then each row divided by its sum.
    for (int64_t b0 = 0; b0 < columns; b0 += block) {
      const int64_t b1 = std::min(columns, b0 + block);
      widen(false, base, b0, b1, values.data());
      for (int64_t r = 0; r < rows; r += kTileRows) {
        const int n = static_cast<int>(std::min<int64_t>(kTileRows, rows - r));
        int64_t j0 = lo[r], j1 = hi[r] + 1;
        for (int t = 1; t < n; ++t) {
          j0 = std::min(j0, lo[r + t]);
          j1 = std::max(j1, hi[r + t] + 1);
        }
        j0 = std::max(j0, b0);
        j1 = std::min(j1, b1);
        if (j0 >= j1) continue;
        // Block-relative: the weights shifted so that column b0 + j is at index j.
        const float* w[kTileRows];
        for (int t = 0; t < n; ++t) w[t] = &scores[(r + t) * columns + b0];
        FoldRows(n, w, values.data(), dv, j0 - b0, j1 - b0, &out_rows[r]);
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      const __m256 inv = _mm256_set1_ps(1.0f / row_sum[r]);
      for (int64_t c = 0; c < dv; c += 8) {
        _mm256_storeu_ps(out_rows[r] + c, _mm256_mul_ps(_mm256_loadu_ps(out_rows[r] + c), inv));
      }
    }
  }
}

}  // namespace attention_avx2
}  // namespace tpserve
