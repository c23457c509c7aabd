#include "worker/kernels/cpu/bf16_avx2.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "worker/dtype.h"
#include "worker/kernels/cpu/cpu_threads.h"

// How the kernel is arranged (measured on a 2-core AMD EPYC Zen 3 without AVX-512;
// docs/design.md, "Model core"). The vector lanes run along the output rows: 8 rows'
// weights for one column times that column's x broadcast, so each accumulator is one
// output's chain and needs no reduction across lanes.
// - One row of x (decode at batch 1) runs two blocks (32 output rows, 4 accumulators,
//   two weight streams prefetched 2 KiB ahead) over the whole of k.
// - More rows run each block over the whole of k, 6 rows of x at a time (12 accumulators),
//   the weight widened in registers: the first pass reads the block from memory, 2 KiB
//   ahead, while the second asks for the next block into L2, so the passes after it
//   compute while the weight streams in. Each half of a column pair's line is loaded
//   where it is widened (an L1 hit), leaving the registers to the accumulators. This
//   beat widening 256-column chunks into an L1 panel for 6-row tiles, as a BLAS kernel
//   does (the previous arrangement from 17 rows), 1.1-1.3x at 16-32 rows and even at 512.
//   Up to 256 rows of x share one pass over the weight.
// - x is laid out tile by tile, a column's rows side by side: broadcasts from rows 8 KiB
//   apart cost 20-25%. Tiles are as even as they go (Tiles). Scratch is kept per thread.

namespace tpserve {
namespace bf16_avx2 {
namespace {

constexpr int64_t kPairElems = 2 * kRowsPerBlock;  // bf16 per column pair of a block: 64 B
constexpr int64_t kPrefetchElems = 1024;           // 2 KiB ahead of the stream
constexpr int64_t kRowGroup = 256;                 // rows of x prepared at a time
constexpr int kTileRows = 6;                       // rows of x per pass over a block

// Column 2p of 8 rows (the low halves of their 32-bit words), as fp32.
inline __m256 Even(__m256i w) { return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)); }
// Column 2p + 1 (the high halves), as fp32.
inline __m256 Odd(__m256i w) {
  return _mm256_castsi256_ps(
      _mm256_and_si256(w, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
}

inline __m256i Load8Rows(const uint16_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

inline void Prefetch(const uint16_t* p) {
  _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
}
inline void PrefetchToL2(const uint16_t* p) {
  _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T1);
}

inline void Store(float* y, float sum, bool accumulate) { *y = accumulate ? *y + sum : sum; }

// One row of prepared x against blocks a and b over all `pairs` column pairs: sums[32],
// block a's 16 rows then block b's.
void OneRowTwoBlocks(const float* x, const uint16_t* a, const uint16_t* b, int64_t pairs,
                     float sums[32]) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, b0 = a0, b1 = a0;
  for (int64_t p = 0; p < pairs; ++p) {
    const uint16_t* wa = a + p * kPairElems;
    const uint16_t* wb = b + p * kPairElems;
    Prefetch(wa + kPrefetchElems);
    Prefetch(wb + kPrefetchElems);
    const __m256 x0 = _mm256_broadcast_ss(x + 2 * p), x1 = _mm256_broadcast_ss(x + 2 * p + 1);
    const __m256i va0 = Load8Rows(wa), va1 = Load8Rows(wa + 16);
    const __m256i vb0 = Load8Rows(wb), vb1 = Load8Rows(wb + 16);
    a0 = _mm256_fmadd_ps(Even(va0), x0, a0);
    a1 = _mm256_fmadd_ps(Even(va1), x0, a1);
    b0 = _mm256_fmadd_ps(Even(vb0), x0, b0);
    b1 = _mm256_fmadd_ps(Even(vb1), x0, b1);
    a0 = _mm256_fmadd_ps(Odd(va0), x1, a0);
    a1 = _mm256_fmadd_ps(Odd(va1), x1, a1);
    b0 = _mm256_fmadd_ps(Odd(vb0), x1, b0);
    b1 = _mm256_fmadd_ps(Odd(vb1), x1, b1);
  }
  _mm256_storeu_ps(sums, a0);
  _mm256_storeu_ps(sums + 8, a1);
  _mm256_storeu_ps(sums + 16, b0);
  _mm256_storeu_ps(sums + 24, b1);
}

// How a pass over a block asks for weight lines ahead of itself.
enum class Ahead {
  kNone,       // the block is in L2 already, and so is the next one
  kThisBlock,  // the block streams from memory: its lines 2 KiB ahead, into L1
  kNextBlock,  // the block is in L2: the next block's line at the same place, into L2
};

// A tile of MB rows of prepared x (column c of row i at x + c·MB + i) against one block
// over all `pairs` column pairs, chains from zero: row i's 16 sums to sums + 16·i.
template <int MB, Ahead kAhead>
void RunBlock(const float* x, const uint16_t* blk, int64_t pairs, const uint16_t* next,
              float* sums) {
  static_assert(MB >= 1 && MB <= kTileRows);
  __m256 lo[MB], hi[MB];  // rows 0-7 and 8-15 of the block, per row of x
#pragma GCC unroll 8
  for (int i = 0; i < MB; ++i) lo[i] = hi[i] = _mm256_setzero_ps();
  for (int64_t p = 0; p < pairs; ++p) {
    const uint16_t* w = blk + p * kPairElems;
    if constexpr (kAhead == Ahead::kThisBlock) Prefetch(w + kPrefetchElems);
    if constexpr (kAhead == Ahead::kNextBlock) PrefetchToL2(next + p * kPairElems);
    const __m256 e0 = Even(Load8Rows(w)), e1 = Even(Load8Rows(w + 16));
#pragma GCC unroll 8
    for (int i = 0; i < MB; ++i) {
      const __m256 xb = _mm256_broadcast_ss(x + 2 * p * MB + i);
      lo[i] = _mm256_fmadd_ps(e0, xb, lo[i]);
      hi[i] = _mm256_fmadd_ps(e1, xb, hi[i]);
    }
    // The same line again for the odd column (an L1 hit): the compiler would otherwise
    // keep its raw words in two registers for the whole step, and 12 accumulators leave
    // none spare. As inlined into MatMul the loop runs at 93-97% of the FMA peak from 32
    // rows (docs/perf.md); register allocation is fragile here, so measure any change.
    const uint16_t* w_odd = w;
    asm("" : "+r"(w_odd));
    const __m256 o0 = Odd(Load8Rows(w_odd)), o1 = Odd(Load8Rows(w_odd + 16));
#pragma GCC unroll 8
    for (int i = 0; i < MB; ++i) {
      const __m256 xb = _mm256_broadcast_ss(x + (2 * p + 1) * MB + i);
      lo[i] = _mm256_fmadd_ps(o0, xb, lo[i]);
      hi[i] = _mm256_fmadd_ps(o1, xb, hi[i]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MB; ++i) {
    _mm256_storeu_ps(sums + i * kRowsPerBlock, lo[i]);
    _mm256_storeu_ps(sums + i * kRowsPerBlock + 8, hi[i]);
  }
}

template <Ahead kAhead>
void RunBlockRows(int rows, const float* x, const uint16_t* blk, int64_t pairs,
                  const uint16_t* next, float* sums) {
  switch (rows) {
    case 1: return RunBlock<1, kAhead>(x, blk, pairs, next, sums);
    case 2: return RunBlock<2, kAhead>(x, blk, pairs, next, sums);
    case 3: return RunBlock<3, kAhead>(x, blk, pairs, next, sums);
    case 4: return RunBlock<4, kAhead>(x, blk, pairs, next, sums);
    case 5: return RunBlock<5, kAhead>(x, blk, pairs, next, sums);
    default: return RunBlock<6, kAhead>(x, blk, pairs, next, sums);
  }
}

// `rows` rows in ceil(rows / max_rows) tiles as even as they go (16 at most 6 → 6, 5, 5;
// 32 → 6, 6, 5, 5, 5, 5): a kernel needs 4 rows (8 accumulators) to keep the
// FMA pipes busy, and a remainder tile of 1 or 2 would run at half speed. Each tile is
// (first row, rows).
std::vector<std::pair<int64_t, int>> Tiles(int64_t rows, int64_t max_rows) {
  const int64_t count = (rows + max_rows - 1) / max_rows;
  std::vector<std::pair<int64_t, int>> tiles;
  for (int64_t t = 0, first = 0; t < count; ++t) {
    const int64_t n = rows / count + (t < rows % count ? 1 : 0);
    tiles.emplace_back(first, static_cast<int>(n));
    first += n;
  }
  return tiles;
}

// 8 floats rounded to bf16 (nearest even; a NaN stays a NaN, made quiet), as fp32: the
// vector form of Bf16ToFloat(FloatToBf16(f)).
inline __m256 RoundToBf16(__m256 f) {
  const __m256i bits = _mm256_castps_si256(f);
  const __m256i high = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_add_epi32(
      bits, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), lsb));
  const __m256i quiet = _mm256_or_si256(bits, _mm256_set1_epi32(0x00400000));
  const __m256 nan = _mm256_cmp_ps(f, f, _CMP_UNORD_Q);
  return _mm256_castsi256_ps(_mm256_and_si256(
      _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(rounded),
                                           _mm256_castsi256_ps(quiet), nan)),
      high));
}

// x: [rows, k] -> xt: each tile's n rows at xt + first·k_pad, column by column (column c
// of its row i at c·n + i), so a kernel's broadcasts of one column are adjacent; rounded
// to bf16, zero past k. 8 columns at a time: each row's 8 rounded in a vector, then
// written out column by column.
void PrepareTiles(const float* x, int64_t k, int64_t k_pad,
                  const std::vector<std::pair<int64_t, int>>& tiles, float* xt) {
  for (const auto& [first, n] : tiles) {
    float* base = xt + first * k_pad;
    const float* rows = x + first * k;
    int64_t c0 = 0;
    for (; c0 + 8 <= k; c0 += 8) {
      float r[kTileRows][8];
      for (int i = 0; i < n; ++i) {
        _mm256_storeu_ps(r[i], RoundToBf16(_mm256_loadu_ps(rows + i * k + c0)));
      }
      float* out = base + c0 * n;
      for (int c = 0; c < 8; ++c) {
        for (int i = 0; i < n; ++i) out[c * n + i] = r[i][c];
      }
    }
    for (int64_t c = c0; c < k_pad; ++c) {
      for (int i = 0; i < n; ++i) {
        base[c * n + i] = c < k ? Bf16ToFloat(FloatToBf16(rows[i * k + c])) : 0.0f;
      }
    }
  }
}

int64_t Offset(int64_t row, int64_t col, int64_t k_pad) {
  return (row / kRowsPerBlock) * kRowsPerBlock * k_pad + (col / 2) * kPairElems +
         (row % kRowsPerBlock) * 2 + col % 2;
}

}  // namespace

int64_t PaddedRows(int64_t n_out) {
  return (n_out + kRowsPerBlock - 1) / kRowsPerBlock * kRowsPerBlock;
}
int64_t PaddedCols(int64_t k) { return (k + 1) / 2 * 2; }

size_t PackedBytes(int64_t n_out, int64_t k) {
  return static_cast<size_t>(PaddedRows(n_out)) * static_cast<size_t>(PaddedCols(k)) *
         sizeof(uint16_t);
}

void PackBlocked(const uint16_t* w, int64_t n_out, int64_t k, uint16_t* out) {
  const int64_t k_pad = PaddedCols(k);
  std::memset(out, 0, PackedBytes(n_out, k));
  for (int64_t row = 0; row < n_out; ++row) {
    uint16_t* dst = out + Offset(row, 0, k_pad);  // column c at dst + (c / 2)·64 + c % 2
    const uint16_t* src = w + row * k;
    for (int64_t c = 0; c < k; ++c) dst[(c >> 1) * kPairElems + (c & 1)] = src[c];
  }
}

uint16_t PackedAt(const uint16_t* packed, int64_t k, int64_t row, int64_t col) {
  return packed[Offset(row, col, PaddedCols(k))];
}

namespace {

// MatMul for output blocks [block_begin, block_end).
void MatMulBlocks(const float* x, int64_t m, const uint16_t* packed, int64_t n_out, int64_t k,
                  float* y, bool accumulate, int64_t block_begin, int64_t block_end) {
  const int64_t k_pad = PaddedCols(k);
  const int64_t pairs = k_pad / 2;
  const int64_t block_elems = kRowsPerBlock * k_pad;
  // Row groups as even as they go (300 rows: 150 and 150, not 256 and 44): each pass over
  // the weight then has rows enough to keep the FMA pipes busy.
  const int64_t groups = (m + kRowGroup - 1) / kRowGroup;
  const int64_t group = (m + groups - 1) / groups;
  // Scratch kept per calling thread between calls (grown, never shrunk: at most kRowGroup
  // rows of x, 11 MiB at k = 11008), so a call does not fault in fresh pages. xt: [group,
  // k_pad] as PrepareTiles lays it out; sums: [group, 16], one block's outputs. The
  // kernels load unaligned.
  thread_local std::vector<float> xt_scratch, sums_scratch;
  auto get = [](std::vector<float>& v, int64_t floats) {
    if (static_cast<int64_t>(v.size()) < floats) v.resize(static_cast<size_t>(floats));
    return v.data();
  };
  float* xt = get(xt_scratch, group * k_pad);
  float* block_sums = get(sums_scratch, group * kRowsPerBlock);
  // y[row][16b + j] = sums[j], skipping the padding rows.
  auto put = [&](int64_t row, int64_t b, const float* sums) {
    for (int64_t j = 0; j < kRowsPerBlock && b * kRowsPerBlock + j < n_out; ++j) {
      Store(y + row * n_out + b * kRowsPerBlock + j, sums[j], accumulate);
    }
  };
  for (int64_t g0 = 0; g0 < m; g0 += group) {
    const int64_t g = std::min(group, m - g0);
    if (g == 1) {
      PrepareTiles(x + g0 * k, k, k_pad, {{0, 1}}, xt);
      for (int64_t b = block_begin; b < block_end; b += 2) {
        float sums[2 * kRowsPerBlock];
        if (b + 1 < block_end) {
          OneRowTwoBlocks(xt, packed + b * block_elems, packed + (b + 1) * block_elems, pairs,
                          sums);
          put(g0, b + 1, sums + kRowsPerBlock);
        } else {
          RunBlock<1, Ahead::kThisBlock>(xt, packed + b * block_elems, pairs, nullptr, sums);
        }
        put(g0, b, sums);
      }
      continue;
    }
    const auto tiles = Tiles(g, kTileRows);
    PrepareTiles(x + g0 * k, k, k_pad, tiles, xt);
    for (int64_t b = block_begin; b < block_end; ++b) {
      const uint16_t* blk = packed + b * block_elems;
      const uint16_t* next = b + 1 < block_end ? blk + block_elems : nullptr;
      for (size_t t = 0; t < tiles.size(); ++t) {
        const auto [i, rows] = tiles[t];
        const float* xi = xt + i * k_pad;
        float* sums = block_sums + i * kRowsPerBlock;
        if (t == 0) {
          RunBlockRows<Ahead::kThisBlock>(rows, xi, blk, pairs, nullptr, sums);
        } else if (t == 1 && next != nullptr) {
          RunBlockRows<Ahead::kNextBlock>(rows, xi, blk, pairs, next, sums);
        } else {
          RunBlockRows<Ahead::kNone>(rows, xi, blk, pairs, nullptr, sums);
        }
      }
      for (int64_t i = 0; i < g; ++i) put(g0 + i, b, block_sums + i * kRowsPerBlock);
    }
  }
}

}  // namespace

void MatMul(const float* x, int64_t m, const uint16_t* packed, int64_t n_out, int64_t k,
            float* y, bool accumulate) {
  if (m <= 0) return;
  // The compute threads take runs of output blocks (at least 8: 128 outputs) as they become
  // free; every output is one chain whatever the split or the pairing of blocks, so no bit
  // moves.
  ParallelChunks(PaddedRows(n_out) / kRowsPerBlock, /*min_chunk=*/8, CpuThreads(),
                 [&](int64_t begin, int64_t end) {
                   MatMulBlocks(x, m, packed, n_out, k, y, accumulate, begin, end);
                 });
}

float ReferenceDot(const float* x_row, const float* w_row, int64_t k, bool accumulate,
                   float prior) {
  float acc = 0.0f;  // with the padding column of an odd k, as the kernel (0·0 turns -0 to +0)
  for (int64_t c = 0; c < PaddedCols(k); ++c) {
    acc = std::fma(c < k ? w_row[c] : 0.0f, c < k ? x_row[c] : 0.0f, acc);
  }
  return accumulate ? prior + acc : acc;
}

}  // namespace bf16_avx2
}  // namespace tpserve
