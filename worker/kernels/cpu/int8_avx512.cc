#include "worker/kernels/cpu/int8_avx512.h"

#include <immintrin.h>

#include <algorithm>

// GCC 12's AVX-512 intrinsics pass _mm512_undefined_*() (a self-initialised variable) as
// the unused merge source of their masked builtins, which -W(maybe-)uninitialized
// reports at every inlined use; nothing in this file reads an uninitialised value.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace tpserve {
namespace int8_avx512 {
namespace {

constexpr int kMaxRows = 8;                        // 8 x 3 accumulators + 3 weights
constexpr int kVectors = kBlockOutputs / 16;       // 16 int32 lanes a vector
constexpr int64_t kLineBytes = kBlockOutputs * 2;  // a block's column pair: 96 bytes
constexpr int64_t kStepPairs = 16;                 // 32 columns, the padding's unit
constexpr int64_t kChunkPairs = kChunkCols / 2;

// A pass that asks ahead (Plan::min_rows_ahead) asks for the weight lines kAheadBytes
// on into L1, three lines every two column pairs.
constexpr int64_t kAheadBytes = kStepPairs * kLineBytes;

static_assert(kChunkPairs % kStepPairs == 0, "chunks are whole steps");

#define TPSERVE_TARGET_AVX512VNNI __attribute__((target("avx512f,avx512bw,avx512vnni")))

// acc += pairwise int16 dot products of x and w (vpdpwssd), in place: GCC 12's builtin
// copies the accumulator to a fresh register and back around every use.
TPSERVE_TARGET_AVX512VNNI inline __attribute__((always_inline)) void DotAccumulate(
    __m512i& acc, __m512i x, __m512i w) {
  asm("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(x), "v"(w));
}

// R rows of xq (x_stride elements apart) against a whole block (pairs column pairs at
// w): sums[r · 48 + o], each chunk's exact int32 lane sums added to them in fp32, from 0.
template <int R, bool kAhead>
TPSERVE_TARGET_AVX512VNNI void Rows(const int16_t* x, int64_t x_stride, const int8_t* w,
                                    int64_t pairs, float* sums) {
  const int32_t* rows[R];  // x's rows as column pairs
  for (int r = 0; r < R; ++r) rows[r] = reinterpret_cast<const int32_t*>(x + r * x_stride);
  for (int i = 0; i < R * kBlockOutputs; i += 16) _mm512_storeu_ps(sums + i, _mm512_setzero_ps());
  for (int64_t p0 = 0; p0 < pairs; p0 += kChunkPairs) {
    const int64_t p1 = std::min(pairs, p0 + kChunkPairs);
    __m512i acc[R][kVectors];
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < kVectors; ++j) acc[r][j] = _mm512_setzero_si512();
    }
    for (int64_t step = p0; step < p1; step += kStepPairs) {
      const int8_t* lines = w + step * kLineBytes;
#pragma GCC unroll 16
      for (int p = 0; p < kStepPairs; ++p) {
        if constexpr (kAhead) {
          if (p % 2 == 0) {  // the three lines of this pair and the next, a step on
            const char* a =
                reinterpret_cast<const char*>(lines + p * kLineBytes) + kAheadBytes;
            _mm_prefetch(a, _MM_HINT_T0);
            _mm_prefetch(a + 64, _MM_HINT_T0);
            _mm_prefetch(a + 128, _MM_HINT_T0);
          }
        }
        __m512i wv[kVectors];
#pragma GCC unroll 3
        for (int j = 0; j < kVectors; ++j) {
          wv[j] = _mm512_cvtepi8_epi16(
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lines + p * kLineBytes) + j));
          // Held in a register from here, as in bf16_avx512.cc: GCC may otherwise reload
          // and extend it for every row.
          asm("" : "+v"(wv[j]));
        }
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const __m512i xv = _mm512_set1_epi32(rows[r][step + p]);
#pragma GCC unroll 3
          for (int j = 0; j < kVectors; ++j) DotAccumulate(acc[r][j], xv, wv[j]);
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < kVectors; ++j) {
        float* s = sums + r * kBlockOutputs + j * 16;
        _mm512_storeu_ps(s, _mm512_add_ps(_mm512_loadu_ps(s), _mm512_cvtepi32_ps(acc[r][j])));
      }
    }
  }
}

using RowsFn = void (*)(const int16_t*, int64_t, const int8_t*, int64_t, float*);

template <bool kAhead>
RowsFn PickRows(int rows) {
  switch (rows) {
    case 1: return &Rows<1, kAhead>;
    case 2: return &Rows<2, kAhead>;
    case 3: return &Rows<3, kAhead>;
    case 4: return &Rows<4, kAhead>;
    case 5: return &Rows<5, kAhead>;
    case 6: return &Rows<6, kAhead>;
    case 7: return &Rows<7, kAhead>;
    default: return &Rows<kMaxRows, kAhead>;
  }
}

}  // namespace

bool Available() {
  static const bool available = __builtin_cpu_supports("avx512f") &&
                                __builtin_cpu_supports("avx512bw") &&
                                __builtin_cpu_supports("avx512vnni");
  return available;
}

void MatMulBlocks(const int16_t* xq, int64_t m, int64_t k_pad, const int8_t* packed,
                  int64_t block_begin, int64_t block_end, StoreSums store) {
  MatMulBlocksIn(Plan(), xq, m, k_pad, packed, block_begin, block_end, store);
}

void MatMulBlocksIn(Plan plan, const int16_t* xq, int64_t m, int64_t k_pad,
                    const int8_t* packed, int64_t block_begin, int64_t block_end,
                    StoreSums store) {
  // Rows in passes as even as they go (13 rows: 7, 6); the passes after the first read
  // the block from L2.
  const int64_t passes = (m + kMaxRows - 1) / kMaxRows;
  alignas(64) float sums[kMaxRows * kBlockOutputs];  // [rows][48]
  for (int64_t block = block_begin; block < block_end; ++block) {
    const int8_t* w = packed + block * kBlockOutputs * k_pad;
    for (int64_t pass = 0, row = 0; pass < passes; ++pass) {
      const int rows = static_cast<int>((m - row) / (passes - pass));
      const RowsFn fn =
          rows >= plan.min_rows_ahead ? PickRows<true>(rows) : PickRows<false>(rows);
      fn(xq + row * k_pad, k_pad, w, k_pad / 2, sums);
      store(block, row, rows, sums);
      row += rows;
    }
  }
}

}  // namespace int8_avx512
}  // namespace tpserve
