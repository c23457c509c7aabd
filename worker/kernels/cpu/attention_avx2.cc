#include "worker/kernels/cpu/attention_avx2.h"

#include <immintrin.h>
#include <unistd.h>

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
constexpr int64_t kValueBlock = 64;    // positions per block of P·V read in place

// This CPU's L2 data cache per core (512 KiB where the C library cannot tell).
int64_t L2Bytes() {
  static const int64_t bytes = [] {
    const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return l2 > 0 ? int64_t{l2} : int64_t{512} << 10;
  }();
  return bytes;
}

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

// The 8 bf16 values at src widened to fp32 (exactly).
inline __m256 Widen8(const uint16_t* src) {
  const __m128i half = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(half), 16));
}

// Asks for the cache lines of `bytes` bytes at p: into every level (kHint _MM_HINT_T0) or
// into L2 and beyond (_MM_HINT_T1).
template <int kHint = _MM_HINT_T0>
inline void PrefetchRow(const void* p, int64_t bytes) {
  const uintptr_t first = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{63};
  const uintptr_t end = reinterpret_cast<uintptr_t>(p) + bytes;
  for (uintptr_t a = first; a < end; a += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(a), static_cast<_mm_hint>(kHint));
  }
}

// Value rows widened into a block buffer: row j at v + j·dv.
struct WidenedValues {
  const float* v;
  int64_t dv;
  __m256 Load(int64_t j, int64_t c) const { return _mm256_loadu_ps(v + j * dv + c); }
};

// Value rows read where they lie in the cache, widened in registers: row j at rows[j].
struct CachedValues {
  const uint16_t* const* rows;
  __m256 Load(int64_t j, int64_t c) const { return Widen8(rows[j] + c); }
};

// o[r][c, c + 8W) += Σ_j p[r][j] · v[j][c, c + 8W) for j in [j0, j1) in order, one fused
// multiply-add a position (v: a WidenedValues or CachedValues).
template <int R, int W, typename Values>
void FoldValues(const float* const* p, const Values& v, int64_t c, int64_t j0, int64_t j1,
                float* const* o) {
  __m256 acc[R][W];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 3
    for (int w = 0; w < W; ++w) acc[r][w] = _mm256_loadu_ps(o[r] + c + 8 * w);
  }
  for (int64_t j = j0; j < j1; ++j) {
    __m256 vj[W];
#pragma GCC unroll 3
    for (int w = 0; w < W; ++w) vj[w] = v.Load(j, c + 8 * w);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256 pr = _mm256_broadcast_ss(p[r] + j);
#pragma GCC unroll 3
      for (int w = 0; w < W; ++w) acc[r][w] = _mm256_fmadd_ps(pr, vj[w], acc[r][w]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 3
    for (int w = 0; w < W; ++w) _mm256_storeu_ps(o[r] + c + 8 * w, acc[r][w]);
  }
}

// Columns [0, dv) of a tile of R rows, 24 at a time (twelve FMA chains at R = 4), then
// 16 and 8.
template <int R, typename Values>
void FoldTile(const float* const* p, const Values& v, int64_t dv, int64_t j0, int64_t j1,
              float* const* o) {
  int64_t c = 0;
  for (; c + 24 <= dv; c += 24) FoldValues<R, 3>(p, v, c, j0, j1, o);
  if (c + 16 <= dv) {
    FoldValues<R, 2>(p, v, c, j0, j1, o);
    c += 16;
  }
  if (c < dv) FoldValues<R, 1>(p, v, c, j0, j1, o);
}

template <typename Values>
void FoldRows(int rows, const float* const* p, const Values& v, int64_t dv, int64_t j0,
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
  for (int64_t c = 0; c < width; c += 8) _mm256_storeu_ps(dst + c, Widen8(src + c));
}

// Scores of R query rows of one token (q: R rows d apart) against the keys of columns
// [0, columns), read where they lie in the cache (krows[j]) and widened in registers:
// s[r·columns + j] = scale · q_r·k_j, and max[r] the rows' maxima. Each tree sums 8 dot
// products, P = 8 / R positions of the R rows, each the same eight lane partial sums over
// d as ScaledDots' and the same SumLanesOfEach, so every score has ScaledDots' bits.
// Each pass asks for the key rows `ahead` positions on, and for the value rows of its own
// positions below asks.values_end (into L2, for the fold that follows the scores).
struct ScoreAsks {
  int64_t ahead;
  const uint16_t* const* values;  // value rows, like krows
  int64_t values_end, value_bytes;
};

template <int R>
void ScoreRowsOfOneToken(const float* q, int64_t d, const uint16_t* const* krows,
                         int64_t columns, const ScoreAsks& asks, __m256 scale, float* s,
                         float* max) {
  constexpr int P = kScoresPerPass / R;
  const int64_t row_bytes = d * static_cast<int64_t>(sizeof(uint16_t));
  for (int64_t j = 0; j < columns; j += P) {
    const int n = static_cast<int>(std::min<int64_t>(P, columns - j));
    const uint16_t* k[P];
#pragma GCC unroll 8
    for (int t = 0; t < P; ++t) {
      k[t] = krows[j + std::min(t, n - 1)];  // a short last pass repeats its last key
      if (j + asks.ahead + t < columns) PrefetchRow(krows[j + asks.ahead + t], row_bytes);
      if (j + t < asks.values_end) {
        PrefetchRow<_MM_HINT_T1>(asks.values[j + t], asks.value_bytes);
      }
    }
    __m256 acc[kScoresPerPass];
#pragma GCC unroll 8
    for (int i = 0; i < kScoresPerPass; ++i) acc[i] = _mm256_setzero_ps();
    for (int64_t c = 0; c < d; c += 8) {
#pragma GCC unroll 8
      for (int t = 0; t < P; ++t) {
        const __m256 kc = Widen8(k[t] + c);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          acc[t * R + r] = _mm256_fmadd_ps(_mm256_loadu_ps(q + r * d + c), kc, acc[t * R + r]);
        }
      }
    }
    alignas(32) float dots[kScoresPerPass];
    _mm256_store_ps(dots, _mm256_mul_ps(SumLanesOfEach(acc), scale));
    for (int t = 0; t < n; ++t) {
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const float x = dots[t * R + r];
        s[r * columns + j + t] = x;
        max[r] = std::max(max[r], x);
      }
    }
  }
}

// Scores of `rows` (at most 8) rows of one token, the key rows asked for about
// kAheadFmas vector FMAs of work ahead (a position of R rows' scores is R·d/8 of them).
void ScoreRows(int rows, const float* q, int64_t d, const uint16_t* const* krows,
               int64_t columns, const uint16_t* const* vrows, int64_t values_end,
               int64_t value_bytes, __m256 scale, float* s, float* max) {
  constexpr int64_t kAheadFmas = 1024;
  const ScoreAsks asks{std::max<int64_t>(8, kAheadFmas * 8 / (rows * d)), vrows, values_end,
                       value_bytes};
  switch (rows) {
    case 1: return ScoreRowsOfOneToken<1>(q, d, krows, columns, asks, scale, s, max);
    case 2: return ScoreRowsOfOneToken<2>(q, d, krows, columns, asks, scale, s, max);
    case 3: return ScoreRowsOfOneToken<3>(q, d, krows, columns, asks, scale, s, max);
    case 4: return ScoreRowsOfOneToken<4>(q, d, krows, columns, asks, scale, s, max);
    case 5: return ScoreRowsOfOneToken<5>(q, d, krows, columns, asks, scale, s, max);
    case 6: return ScoreRowsOfOneToken<6>(q, d, krows, columns, asks, scale, s, max);
    case 7: return ScoreRowsOfOneToken<7>(q, d, krows, columns, asks, scale, s, max);
    default: return ScoreRowsOfOneToken<8>(q, d, krows, columns, asks, scale, s, max);
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
  const KvCacheShape& shape = cache.shape();
  const int block_size = shape.block_size;
  const int64_t block = BlockPositions(d);
  const int64_t tokens_per_chunk = std::max<int64_t>(1, kRowsPerChunk / group);
  const int32_t first_pos = seq.context_len - seq.num_new_tokens;
  const __m256 scale = _mm256_set1_ps(p.scale);
  // Per thread, grown and kept: keys: [block + 8, d] (a pass of 8 past the block's last
  // row reads rows whose lanes it drops; zeroed once, so never uninitialised); values:
  // [block, dv]; scores: [rows, columns] of a chunk; the rows' windows, maxima, sums and
  // output rows; the chunk's columns' key and value rows in the cache.
  thread_local std::vector<float> keys, values, scores, row_max, row_sum;
  thread_local std::vector<int64_t> lo, hi;
  thread_local std::vector<float*> out_rows;
  thread_local std::vector<const uint16_t*> key_rows, value_rows;
  if (static_cast<int64_t>(keys.size()) < (block + kScoresPerPass) * d) {
    keys.assign((block + kScoresPerPass) * d, 0.0f);
  }
  if (static_cast<int64_t>(values.size()) < block * dv) values.resize(block * dv);
  const uint16_t* const key_head = cache.key_bf16(layer, 0) + kv_head * d;
  const uint16_t* const value_head = cache.value_bf16(layer, 0) + kv_head * dv;
  const int64_t key_stride = int64_t{shape.num_kv_heads} * shape.head_dim;
  const int64_t value_stride = int64_t{shape.num_kv_heads} * shape.v_head_dim;
  // Columns [c0, c1)'s key or value rows widened into dst, [c1 - c0, width].
  auto widen = [&](const uint16_t* const* rows, int64_t width, int64_t c0, int64_t c1,
                   float* dst) {
    for (int64_t c = c0; c < c1; ++c) WidenRow(rows[c], width, dst + (c - c0) * width);
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
    key_rows.resize(columns);
    value_rows.resize(columns);
    for (int64_t c = 0; c < columns;) {  // a cache block's slots at a time
      const int32_t pos = base + static_cast<int32_t>(c);
      const int64_t slot = seq.SlotOf(pos, block_size);
      const int64_t n = std::min<int64_t>(block_size - pos % block_size, columns - c);
      for (int64_t t = 0; t < n; ++t, ++c) {
        key_rows[c] = key_head + (slot + t) * key_stride;
        value_rows[c] = value_head + (slot + t) * value_stride;
      }
    }
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
    // A chunk of one token (a decode): every row's window is all the columns, and each
    // key and value is read where it lies, once for up to eight rows. The first rows'
    // scores ask for as many of the value rows as fit in L2, for the fold that follows
    // (1.2x the kernel at 1,024 positions, docs/perf.md).
    const bool one_token = i1 - i0 == 1;
    const int64_t value_bytes = dv * static_cast<int64_t>(sizeof(uint16_t));
    if (one_token) {
      const float* q_token = q + ((t0 + i0) * p.num_heads + kv_head * group) * d;
      for (int64_t r = 0; r < rows; r += kScoresPerPass) {
        const int n = static_cast<int>(std::min<int64_t>(kScoresPerPass, rows - r));
        const int64_t values_end = r == 0 ? std::min(columns, L2Bytes() / value_bytes) : 0;
        ScoreRows(n, q_token + r * d, d, key_rows.data(), columns, value_rows.data(), values_end,
                  value_bytes, scale, &scores[r * columns], &row_max[r]);
      }
    }
    // Scores of each row's window and their maximum, a block of keys at a time.
    for (int64_t b0 = 0; !one_token && b0 < columns; b0 += block) {
      const int64_t b1 = std::min(columns, b0 + block);
      widen(key_rows.data(), d, b0, b1, keys.data());

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
    // (weights outside a row's own are +0). Then each row divided by its sum. A one-token
    // chunk's values are read where they lie, kValueBlock positions at a time (each
    // block's rows stay in L1 for the chunk's later tiles); others' are widened first.
    const int64_t vblock = one_token ? kValueBlock : block;
    for (int64_t b0 = 0; b0 < columns; b0 += vblock) {
      const int64_t b1 = std::min(columns, b0 + vblock);
      if (!one_token) widen(value_rows.data(), dv, b0, b1, values.data());
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
        if (one_token) {
          FoldRows(n, w, CachedValues{value_rows.data() + b0}, dv, j0 - b0, j1 - b0,
                   &out_rows[r]);
        } else {
          FoldRows(n, w, WidenedValues{values.data(), dv}, dv, j0 - b0, j1 - b0, &out_rows[r]);
        }
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
