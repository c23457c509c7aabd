#include "worker/kernels/cpu/bf16_avx2.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>
#include <vector>

#include "worker/kernels/cpu/cpu_threads.h"

// How the kernel is arranged (measured on a 2-core AMD EPYC Zen 3 without AVX-512;
// docs/design.md, "Model core"). The vector lanes run along the output rows: 8 rows'
// weights for one column times that column's x broadcast, so each accumulator is one
// output's chain and needs no reduction across lanes.
// - One row of x (decode at batch 1) runs two blocks (32 output rows, 4 accumulators,
//   two weight streams prefetched 2 KiB ahead) over the whole of k.
// - More rows run each block over the whole of k, 6 rows of x at a time (12 accumulators),
//   the weight widened in registers: the first pass reads the block 2 KiB ahead, and
//   every pass asks for its share of the next block's lines, so the weight streams in
//   while all the passes compute. Each half of a column pair's line is loaded
//   where it is widened (an L1 hit), leaving the registers to the accumulators. This
//   beat widening 256-column chunks into an L1 panel for 6-row tiles, as a BLAS kernel
//   does (the previous arrangement from 17 rows), 1.1-1.3x at 16-32 rows and even at 512.
//   Up to 256 rows of x share one pass over the weight.
// - A pass needs 10 accumulators to cover the FMA latency (two pipes, 5 cycles on Zen 2),
//   so a remainder of 1-3 rows runs over two or three blocks at once: 8 rows are a 6-row
//   tile and a 2-row tile over three blocks, not two 4-row tiles (PlanTiles).
// - x is laid out tile by tile, a column's rows side by side: broadcasts from rows 8 KiB
//   apart cost 20-25%. Scratch is kept per thread.

namespace tpserve {
namespace bf16_avx2 {
namespace {

constexpr int64_t kPrefetchElems = 1024;           // 2 KiB ahead of the stream
constexpr int64_t kRowGroup = 256;                 // rows of x prepared at a time
constexpr int kMaxTwoBlockRows = 3;                // rows of x per pass over two blocks
constexpr int64_t kShortBlockRun = 8;              // least blocks a thread takes at a time
constexpr int64_t kRunWork = int64_t{1} << 20;     // or least rows × k_pad × blocks, if fewer

// Column 2p of 8 rows (the low halves of their 32-bit words), as fp32.
inline __m256 Even(__m256i w) { return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)); }
// Column 2p + 1 (the high halves), as fp32.
inline __m256 Odd(__m256i w) {
  return _mm256_castsi256_ps(
      _mm256_and_si256(w, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
}

// Odd's value, the mask read from memory by the AND itself: a kernel with every register
// taken needs none for the mask (the compiler would keep it in one, and spill an
// accumulator instead).
alignas(32) constexpr uint32_t kHighHalves[8] = {0xFFFF0000u, 0xFFFF0000u, 0xFFFF0000u,
                                                 0xFFFF0000u, 0xFFFF0000u, 0xFFFF0000u,
                                                 0xFFFF0000u, 0xFFFF0000u};
inline __m256 OddMaskInMemory(__m256i w) {
  asm("vpand %[mask], %[w], %[w]" : [w] "+x"(w) : [mask] "m"(kHighHalves));
  return _mm256_castsi256_ps(w);
}

inline __m256i Load8Rows(const uint16_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

inline void Prefetch(const uint16_t* p) {
  _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
}
inline void PrefetchToL2(const char* p) { _mm_prefetch(p, _MM_HINT_T1); }

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
  kNone,       // the block is in L2 already
  kThisBlock,  // the block streams from memory: its lines 2 KiB ahead, into L1
  // The block is in cache (or mostly): the pass asks for a later block's lines, the side
  // stream's, one at side.from + p·side.step each column pair p, with a T1 hint (into L2;
  // AMD cores before Zen 4 fill L1 too).
  kSide,
  kThisAndSide,  // both
};

// Where a pass asks for lines ahead of the run's passes (kSide): GroupBlocks' side_stream
// spreads the run's weight over its passes in proportion to their work.
struct Side {
  const char* from = nullptr;
  int64_t step = 0;  // bytes a column pair
};

// A tile of MB rows of prepared x (column c of row i at x + c·MB + i) against one block
// over all `pairs` column pairs, chains from zero: row i's 16 sums to sums + 16·i.
// Not inlined: compiled apart from its callers, its loop keeps its 12 accumulators in
// registers whatever else GroupBlocks holds (inlined, a change elsewhere in GroupBlocks
// once sent accumulators to the stack).
template <int MB, Ahead kAhead>
__attribute__((noinline)) void RunBlock(const float* x, const uint16_t* blk, int64_t pairs,
                                        Side side, float* sums) {
  static_assert(MB >= 1 && MB <= kTileRows);
  __m256 lo[MB], hi[MB];  // rows 0-7 and 8-15 of the block, per row of x
#pragma GCC unroll 8
  for (int i = 0; i < MB; ++i) lo[i] = hi[i] = _mm256_setzero_ps();
  for (int64_t p = 0; p < pairs; ++p) {
    const uint16_t* w = blk + p * kPairElems;
    if constexpr (kAhead == Ahead::kThisBlock || kAhead == Ahead::kThisAndSide) {
      Prefetch(w + kPrefetchElems);
    }
    if constexpr (kAhead == Ahead::kSide || kAhead == Ahead::kThisAndSide) {
      PrefetchToL2(side.from + p * side.step);
    }
    const __m256 e0 = Even(Load8Rows(w)), e1 = Even(Load8Rows(w + 16));
#pragma GCC unroll 8
    for (int i = 0; i < MB; ++i) {
      const __m256 xb = _mm256_broadcast_ss(x + 2 * p * MB + i);
      lo[i] = _mm256_fmadd_ps(e0, xb, lo[i]);
      hi[i] = _mm256_fmadd_ps(e1, xb, hi[i]);
    }
    // The same line again for the odd column (an L1 hit): the compiler would otherwise
    // keep its raw words in two registers for the whole step, and 12 accumulators leave
    // none spare, nor one for Odd's mask. Register allocation is fragile here, so measure
    // any change (and look for ymm spills in the disassembly).
    const uint16_t* w_odd = w;
    asm("" : "+r"(w_odd));
    const __m256 o0 = OddMaskInMemory(Load8Rows(w_odd));
    const __m256 o1 = OddMaskInMemory(Load8Rows(w_odd + 16));
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
void RunBlockRows(int rows, const float* x, const uint16_t* blk, int64_t pairs, Side side,
                  float* sums) {
  switch (rows) {
    case 1: return RunBlock<1, kAhead>(x, blk, pairs, side, sums);
    case 2: return RunBlock<2, kAhead>(x, blk, pairs, side, sums);
    case 3: return RunBlock<3, kAhead>(x, blk, pairs, side, sums);
    case 4: return RunBlock<4, kAhead>(x, blk, pairs, side, sums);
    case 5: return RunBlock<5, kAhead>(x, blk, pairs, side, sums);
    default: return RunBlock<6, kAhead>(x, blk, pairs, side, sums);
  }
}

// RunTwoBlocks<3>, written out: twelve accumulators, three broadcasts and one weight take
// all 16 registers, and compiled from intrinsics two accumulators went to the stack each
// pass (their chains then waited on store forwarding, and the tile ran slower than two
// one-block passes). Registers: ymm0-2 rows 0-2 of block a's outputs 0-7, ymm3-5 its
// outputs 8-15, ymm6-11 block b's alike; ymm12-14 the rows' x, ymm15 the weight (the odd
// column's widened by two shifts: an AND with the mask in memory ran 3-5% slower here). The
// same FMAs in the same order for each output as RunTwoBlocks<MB < 3> and RunBlock. It ends
// with vzeroupper, as the compiler ends its AVX functions (SSE code after it pays no
// transition penalty on Intel cores).
#define TPSERVE_WIDEN_EVEN(off, blk) \
  "vmovdqu " off "(%[" blk "]), %%ymm15\n\t" \
  "vpslld $16, %%ymm15, %%ymm15\n\t"
#define TPSERVE_WIDEN_ODD(off, blk) \
  "vmovdqu " off "(%[" blk "]), %%ymm15\n\t" \
  "vpsrld $16, %%ymm15, %%ymm15\n\t" \
  "vpslld $16, %%ymm15, %%ymm15\n\t"
#define TPSERVE_FMA_ROWS(r0, r1, r2) \
  "vfmadd231ps %%ymm15, %%ymm12, %%ymm" r0 "\n\t" \
  "vfmadd231ps %%ymm15, %%ymm13, %%ymm" r1 "\n\t" \
  "vfmadd231ps %%ymm15, %%ymm14, %%ymm" r2 "\n\t"
#define TPSERVE_BROADCAST_X(o0, o1, o2) \
  "vbroadcastss " o0 "(%[x]), %%ymm12\n\t" \
  "vbroadcastss " o1 "(%[x]), %%ymm13\n\t" \
  "vbroadcastss " o2 "(%[x]), %%ymm14\n\t"
#define TPSERVE_STORE_ROW(reg_lo, reg_hi, off_lo, off_hi, dst) \
  "vmovups %%ymm" reg_lo ", " off_lo "(%[" dst "])\n\t" \
  "vmovups %%ymm" reg_hi ", " off_hi "(%[" dst "])\n\t"
// The side stream's line for this column pair (Ahead::kSide), and the next pair's address.
#define TPSERVE_ASK_SIDE "prefetcht1 (%[side])\n\tadd %[step], %[side]\n\t"
#define TPSERVE_EVERY_VECTOR_CLOBBERED                                                    \
  "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", \
      "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "memory", "cc"
// Accumulators ymm0-11 to zero; past the loop (label 2) if there are no column pairs.
#define TPSERVE_ZERO_TWELVE_AND_ENTER \
  "vxorps %%xmm0, %%xmm0, %%xmm0\n\tvxorps %%xmm1, %%xmm1, %%xmm1\n\t" \
  "vxorps %%xmm2, %%xmm2, %%xmm2\n\tvxorps %%xmm3, %%xmm3, %%xmm3\n\t" \
  "vxorps %%xmm4, %%xmm4, %%xmm4\n\tvxorps %%xmm5, %%xmm5, %%xmm5\n\t" \
  "vxorps %%xmm6, %%xmm6, %%xmm6\n\tvxorps %%xmm7, %%xmm7, %%xmm7\n\t" \
  "vxorps %%xmm8, %%xmm8, %%xmm8\n\tvxorps %%xmm9, %%xmm9, %%xmm9\n\t" \
  "vxorps %%xmm10, %%xmm10, %%xmm10\n\tvxorps %%xmm11, %%xmm11, %%xmm11\n\t" \
  "test %[pairs], %[pairs]\n\t" \
  "jle 2f\n"
#define TPSERVE_TWO_BLOCKS_THREE_ROWS(AHEAD)                                                \
  TPSERVE_ZERO_TWELVE_AND_ENTER                                                          \
  "1:\n\t" AHEAD TPSERVE_BROADCAST_X("0", "4", "8")                                       \
  TPSERVE_WIDEN_EVEN("0", "a") TPSERVE_FMA_ROWS("0", "1", "2")                            \
  TPSERVE_WIDEN_EVEN("32", "a") TPSERVE_FMA_ROWS("3", "4", "5")                           \
  TPSERVE_WIDEN_EVEN("0", "b") TPSERVE_FMA_ROWS("6", "7", "8")                            \
  TPSERVE_WIDEN_EVEN("32", "b") TPSERVE_FMA_ROWS("9", "10", "11")                         \
  TPSERVE_BROADCAST_X("12", "16", "20")                                                   \
  TPSERVE_WIDEN_ODD("0", "a") TPSERVE_FMA_ROWS("0", "1", "2")                             \
  TPSERVE_WIDEN_ODD("32", "a") TPSERVE_FMA_ROWS("3", "4", "5")                            \
  TPSERVE_WIDEN_ODD("0", "b") TPSERVE_FMA_ROWS("6", "7", "8")                             \
  TPSERVE_WIDEN_ODD("32", "b") TPSERVE_FMA_ROWS("9", "10", "11")                          \
  "add $24, %[x]\n\t"                                                                     \
  "add $64, %[a]\n\t"                                                                     \
  "add $64, %[b]\n\t"                                                                     \
  "dec %[pairs]\n\t"                                                                      \
  "jnz 1b\n"                                                                              \
  "2:\n\t"                                                                                \
  TPSERVE_STORE_ROW("0", "3", "0", "32", "sa") TPSERVE_STORE_ROW("1", "4", "64", "96", "sa") \
  TPSERVE_STORE_ROW("2", "5", "128", "160", "sa")                                         \
  TPSERVE_STORE_ROW("6", "9", "0", "32", "sb") TPSERVE_STORE_ROW("7", "10", "64", "96", "sb") \
  TPSERVE_STORE_ROW("8", "11", "128", "160", "sb")                                        \
  "vzeroupper\n\t"

template <Ahead kAhead>
__attribute__((noinline)) void TwoBlocksThreeRows(const float* x, const uint16_t* a,
                                                  const uint16_t* b, int64_t pairs, Side side,
                                                  float* sums_a, float* sums_b) {
  static_assert(kAhead == Ahead::kThisBlock || kAhead == Ahead::kSide ||
                kAhead == Ahead::kNone);
  const char* side_at = side.from;
  static_assert(kPrefetchElems * sizeof(uint16_t) == 2048 && kPairElems == 32 &&
                kRowsPerBlock == 16);
#define TPSERVE_OPERANDS                                                                  \
  : [x] "+r"(x), [a] "+r"(a), [b] "+r"(b), [pairs] "+r"(pairs), [side] "+r"(side_at)     \
  : [sa] "r"(sums_a), [sb] "r"(sums_b), [step] "r"(side.step)                             \
  : TPSERVE_EVERY_VECTOR_CLOBBERED
  if constexpr (kAhead == Ahead::kThisBlock) {
    asm volatile(TPSERVE_TWO_BLOCKS_THREE_ROWS(
        "prefetcht0 2048(%[a])\n\tprefetcht0 2048(%[b])\n\t") TPSERVE_OPERANDS);
  } else if constexpr (kAhead == Ahead::kSide) {
    asm volatile(TPSERVE_TWO_BLOCKS_THREE_ROWS(TPSERVE_ASK_SIDE) TPSERVE_OPERANDS);
  } else {
    asm volatile(TPSERVE_TWO_BLOCKS_THREE_ROWS("") TPSERVE_OPERANDS);
  }
#undef TPSERVE_OPERANDS
}
#undef TPSERVE_TWO_BLOCKS_THREE_ROWS

// Two rows of x against three blocks a, b and c at once, written out like
// TwoBlocksThreeRows: twelve accumulators, two broadcasts, the weight and the odd column's
// mask take the 16 registers. Registers: ymm(4j + h·2 + i) row i's outputs 8h .. 8h + 7 of
// block j (a, b, c = 0, 1, 2); ymm12-13 the rows' x; ymm14 the mask of high halves; ymm15
// the weight (the odd column's loaded by its AND with the mask). Row i's 16 sums of block
// a to sums_a + 16·i, of b and c alike. The same FMAs in the same order for each output
// as RunBlock's.
#define TPSERVE_FMA_TWO_ROWS(r0, r1) \
  "vfmadd231ps %%ymm15, %%ymm12, %%ymm" r0 "\n\t" \
  "vfmadd231ps %%ymm15, %%ymm13, %%ymm" r1 "\n\t"
#define TPSERVE_ODD_MASKED(off, blk) \
  "vpand " off "(%[" blk "]), %%ymm14, %%ymm15\n\t"
// One column's six weight vectors, each widened by WIDEN, times the two rows' x.
#define TPSERVE_THREE_BLOCKS_COLUMN(WIDEN) \
  WIDEN("0", "a") TPSERVE_FMA_TWO_ROWS("0", "1") \
  WIDEN("32", "a") TPSERVE_FMA_TWO_ROWS("2", "3") \
  WIDEN("0", "b") TPSERVE_FMA_TWO_ROWS("4", "5") \
  WIDEN("32", "b") TPSERVE_FMA_TWO_ROWS("6", "7") \
  WIDEN("0", "c") TPSERVE_FMA_TWO_ROWS("8", "9") \
  WIDEN("32", "c") TPSERVE_FMA_TWO_ROWS("10", "11")
#define TPSERVE_THREE_BLOCKS_TWO_ROWS(AHEAD)                                                \
  "vmovdqu %[mask], %%ymm14\n\t"                                                          \
  TPSERVE_ZERO_TWELVE_AND_ENTER                                                          \
  "1:\n\t" AHEAD                                                                          \
  "vbroadcastss 0(%[x]), %%ymm12\n\tvbroadcastss 4(%[x]), %%ymm13\n\t"                    \
  TPSERVE_THREE_BLOCKS_COLUMN(TPSERVE_WIDEN_EVEN)                                         \
  "vbroadcastss 8(%[x]), %%ymm12\n\tvbroadcastss 12(%[x]), %%ymm13\n\t"                   \
  TPSERVE_THREE_BLOCKS_COLUMN(TPSERVE_ODD_MASKED)                                         \
  "add $16, %[x]\n\t"                                                                     \
  "add $64, %[a]\n\t"                                                                     \
  "add $64, %[b]\n\t"                                                                     \
  "add $64, %[c]\n\t"                                                                     \
  "dec %[pairs]\n\t"                                                                      \
  "jnz 1b\n"                                                                              \
  "2:\n\t"                                                                                \
  TPSERVE_STORE_ROW("0", "2", "0", "32", "sa") TPSERVE_STORE_ROW("1", "3", "64", "96", "sa") \
  TPSERVE_STORE_ROW("4", "6", "0", "32", "sb") TPSERVE_STORE_ROW("5", "7", "64", "96", "sb") \
  TPSERVE_STORE_ROW("8", "10", "0", "32", "sc")                                           \
  TPSERVE_STORE_ROW("9", "11", "64", "96", "sc")                                          \
  "vzeroupper\n\t"

template <Ahead kAhead>
__attribute__((noinline)) void ThreeBlocksTwoRows(const float* x, const uint16_t* a,
                                                  const uint16_t* b, const uint16_t* c,
                                                  int64_t pairs, Side side, float* sums_a,
                                                  float* sums_b, float* sums_c) {
  static_assert(kAhead == Ahead::kSide || kAhead == Ahead::kNone);
  static_assert(kPairElems == 32 && kRowsPerBlock == 16);
  const char* side_at = side.from;
#define TPSERVE_OPERANDS                                                                  \
  : [x] "+r"(x), [a] "+r"(a), [b] "+r"(b), [c] "+r"(c), [pairs] "+r"(pairs),              \
    [side] "+r"(side_at)                                                                  \
  : [sa] "r"(sums_a), [sb] "r"(sums_b), [sc] "r"(sums_c), [step] "r"(side.step),          \
    [mask] "m"(kHighHalves)                                                               \
  : TPSERVE_EVERY_VECTOR_CLOBBERED
  if constexpr (kAhead == Ahead::kSide) {
    asm volatile(TPSERVE_THREE_BLOCKS_TWO_ROWS(TPSERVE_ASK_SIDE) TPSERVE_OPERANDS);
  } else {
    asm volatile(TPSERVE_THREE_BLOCKS_TWO_ROWS("") TPSERVE_OPERANDS);
  }
#undef TPSERVE_OPERANDS
}
#undef TPSERVE_THREE_BLOCKS_TWO_ROWS
#undef TPSERVE_THREE_BLOCKS_COLUMN
#undef TPSERVE_ODD_MASKED
#undef TPSERVE_FMA_TWO_ROWS
#undef TPSERVE_STORE_ROW
#undef TPSERVE_ZERO_TWELVE_AND_ENTER
#undef TPSERVE_EVERY_VECTOR_CLOBBERED
#undef TPSERVE_ASK_SIDE
#undef TPSERVE_BROADCAST_X
#undef TPSERVE_FMA_ROWS
#undef TPSERVE_WIDEN_ODD
#undef TPSERVE_WIDEN_EVEN

// A tile of MB <= 3 rows against two blocks a and b at once, 4·MB chains: over one block
// its 2·MB would leave the FMA pipes idle much of the time (docs/perf.md). Each output is
// the same chain as RunBlock's. Row i's 16 sums of block a to sums_a + 16·i, of b to
// sums_b + 16·i. kThisBlock streams both blocks; kSide and kNone find them in cache.
template <int MB, Ahead kAhead>
__attribute__((noinline)) void RunTwoBlocks(const float* x, const uint16_t* a,
                                            const uint16_t* b, int64_t pairs, Side side,
                                            float* sums_a, float* sums_b) {
  static_assert(MB >= 1 && MB < kMaxTwoBlockRows);  // 3: TwoBlocksThreeRows
  static_assert(kAhead == Ahead::kThisBlock || kAhead == Ahead::kSide ||
                kAhead == Ahead::kNone);
  __m256 acc[4][MB];  // per weight vector (a's rows 0-7, 8-15, b's alike), per row of x
#pragma GCC unroll 4
  for (int v = 0; v < 4; ++v) {
#pragma GCC unroll 4
    for (int i = 0; i < MB; ++i) acc[v][i] = _mm256_setzero_ps();
  }
  for (int64_t p = 0; p < pairs; ++p) {
    const uint16_t* wa = a + p * kPairElems;
    const uint16_t* wb = b + p * kPairElems;
    if constexpr (kAhead == Ahead::kThisBlock) {
      Prefetch(wa + kPrefetchElems);
      Prefetch(wb + kPrefetchElems);
    }
    if constexpr (kAhead == Ahead::kSide) PrefetchToL2(side.from + p * side.step);
    const uint16_t* const vectors[4] = {wa, wa + 16, wb, wb + 16};
    // One column of the pair: its x (MB values) times the four weight vectors, widened.
    auto column = [&](const float* xc, auto widen) {
      __m256 xb[MB];
#pragma GCC unroll 4
      for (int i = 0; i < MB; ++i) xb[i] = _mm256_broadcast_ss(xc + i);
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) {
        const __m256 w = widen(Load8Rows(vectors[v]));
#pragma GCC unroll 4
        for (int i = 0; i < MB; ++i) acc[v][i] = _mm256_fmadd_ps(w, xb[i], acc[v][i]);
      }
    };
    column(x + 2 * p * MB, [](__m256i w) { return Even(w); });
    column(x + (2 * p + 1) * MB, [](__m256i w) { return OddMaskInMemory(w); });
  }
#pragma GCC unroll 4
  for (int i = 0; i < MB; ++i) {
    _mm256_storeu_ps(sums_a + i * kRowsPerBlock, acc[0][i]);
    _mm256_storeu_ps(sums_a + i * kRowsPerBlock + 8, acc[1][i]);
    _mm256_storeu_ps(sums_b + i * kRowsPerBlock, acc[2][i]);
    _mm256_storeu_ps(sums_b + i * kRowsPerBlock + 8, acc[3][i]);
  }
}

template <Ahead kAhead>
void RunTwoBlocksRows(int rows, const float* x, const uint16_t* a, const uint16_t* b,
                      int64_t pairs, Side side, float* sums_a, float* sums_b) {
  switch (rows) {
    case 1: return RunTwoBlocks<1, kAhead>(x, a, b, pairs, side, sums_a, sums_b);
    case 2: return RunTwoBlocks<2, kAhead>(x, a, b, pairs, side, sums_a, sums_b);
    default: return TwoBlocksThreeRows<kAhead>(x, a, b, pairs, side, sums_a, sums_b);
  }
}

// A pass of `rows` rows of prepared x over `blocks` consecutive blocks from `first`
// (block_elems apart), block j's sums to sums[j]: over one block 1-6 rows, over two 1-3,
// over three 2. Any other shape (PlanTiles makes none) runs as one-block passes, and a
// prefetch kind a kernel lacks as the nearest one it has: the same arithmetic either way.
template <Ahead kAhead>
void RunPass(int64_t blocks, int rows, const float* x, const uint16_t* first,
             int64_t block_elems, int64_t pairs, Side side, float* const* sums) {
  constexpr Ahead kTwo = kAhead == Ahead::kThisAndSide ? Ahead::kSide : kAhead;
  constexpr Ahead kThree = kTwo == Ahead::kThisBlock ? Ahead::kNone : kTwo;
  if (blocks == 2 && rows <= kMaxTwoBlockRows) {
    RunTwoBlocksRows<kTwo>(rows, x, first, first + block_elems, pairs, side, sums[0],
                           sums[1]);
  } else if (blocks == 3 && rows == 2) {
    ThreeBlocksTwoRows<kThree>(x, first, first + block_elems, first + 2 * block_elems,
                               pairs, side, sums[0], sums[1], sums[2]);
  } else {
    for (int64_t j = 0; j < blocks; ++j) {
      RunBlockRows<kAhead>(rows, x, first + j * block_elems, pairs, side, sums[j]);
    }
  }
}

// How a group's rows are split into tiles. Each pass of a tile over a block needs 10 FMA
// chains to cover the FMA latency (5 cycles, two pipes), and 12 keep the pipes fuller: a
// one-block tile of r rows has 2r, a tile over s blocks at once 2rs. So: one-block tiles of
// 6 rows, and the remainder as
// - 5 or 4 rows: one tile (10 → 5 + 5, 4 → 4);
// - 3 rows: a two-block tile (9 → 6 + 3, 3 → 3);
// - 2 rows: a three-block tile (8 → 6 + 2, 14 → 6 + 6 + 2), or alone a two-block one;
// - 1 row: a 6 becomes a 5, and a three-block tile takes 2 (7 → 5 + 2, 13 → 6 + 5 + 2).
// In cache, one thread (bf16_gemm_benchmark's line of passes, CachedPassFlops): a 6-row
// pass ran at 99% of the FMA peak, the three-block 2-row one at 91-95%, a 5-row pass at 88%
// and the two-block 3-row one at 89-90% (so 8 rows as 6 + 2 beat 5 + 3). Each tile is
// (first row, rows); `span` is how many blocks the last tile runs over at once (1: every
// tile runs over one).
struct TilePlan {
  std::vector<std::pair<int64_t, int>> tiles;
  int span = 1;
};

TilePlan PlanTiles(int64_t rows) {
  std::vector<int> sizes(static_cast<size_t>(rows / kTileRows), kTileRows);
  int span = 1;
  switch (rows % kTileRows) {
    case 0: break;
    case 5: sizes.push_back(5); break;
    case 4:
      if (sizes.empty()) {
        sizes.push_back(4);
      } else {
        sizes.back() = 5;
        sizes.push_back(5);
      }
      break;
    case 3: sizes.push_back(3); span = 2; break;
    case 2:
      span = sizes.empty() ? 2 : 3;
      sizes.push_back(2);
      break;
    default:  // 1
      if (sizes.empty()) {
        sizes.push_back(1);  // (GroupBlocks runs a group of one row apart)
        break;
      }
      sizes.back() = 5;
      sizes.push_back(2);
      span = 3;
      break;
  }
  TilePlan plan;
  plan.span = span;
  int64_t first = 0;
  for (int n : sizes) {
    plan.tiles.emplace_back(first, n);
    first += n;
  }
  return plan;
}

// x: [rows, k] -> xt: each tile's n rows at xt + first·k_pad, as PrepareTile lays them.
void PrepareTiles(const float* x, int64_t k, int64_t k_pad,
                  const std::pair<int64_t, int>* tiles, size_t count, float* xt) {
  for (size_t t = 0; t < count; ++t) {
    const auto [first, n] = tiles[t];
    PrepareTile(x + first * k, k, n, xt + first * k_pad);
  }
}

// y[row][16b + j] = sums[j] (or += when accumulating), skipping the padding rows. A full
// block in two vector stores: y's lines are mostly not in cache, and with a store a float
// the store queue filled with their misses (5% of a 512-row GEMM's profile samples).
void PutBlock(float* y, int64_t n_out, int64_t row, int64_t b, const float* sums,
              bool accumulate) {
  float* dst = y + row * n_out + b * kRowsPerBlock;
  if ((b + 1) * kRowsPerBlock <= n_out) {
    __m256 lo = _mm256_loadu_ps(sums), hi = _mm256_loadu_ps(sums + 8);
    if (accumulate) {
      lo = _mm256_add_ps(_mm256_loadu_ps(dst), lo);
      hi = _mm256_add_ps(_mm256_loadu_ps(dst + 8), hi);
    }
    _mm256_storeu_ps(dst, lo);
    _mm256_storeu_ps(dst + 8, hi);
    return;
  }
  for (int64_t j = 0; j < kRowsPerBlock && b * kRowsPerBlock + j < n_out; ++j) {
    Store(y + row * n_out + b * kRowsPerBlock + j, sums[j], accumulate);
  }
}

// One row group's outputs for output blocks [block_begin, block_end): xt holds the group's
// g rows as PrepareTiles laid them out for `plan`; y is the group's first row of output.
void GroupBlocks(const float* xt, int64_t g, const TilePlan& plan, const uint16_t* packed,
                 int64_t n_out, int64_t k, float* y, bool accumulate, int64_t block_begin,
                 int64_t block_end) {
  const int64_t k_pad = PaddedCols(k);
  const int64_t pairs = k_pad / 2;
  const int64_t block_elems = kRowsPerBlock * k_pad;
  // One block's outputs, [g, 16], kept per thread between calls (grown, never shrunk).
  thread_local std::vector<float> sums_scratch;
  if (static_cast<int64_t>(sums_scratch.size()) < g * kRowsPerBlock) {
    sums_scratch.resize(static_cast<size_t>(g * kRowsPerBlock));
  }
  float* block_sums = sums_scratch.data();
  auto put = [&](int64_t row, int64_t b, const float* sums) {
    PutBlock(y, n_out, row, b, sums, accumulate);
  };
  if (g == 1) {
    for (int64_t b = block_begin; b < block_end; b += 2) {
      float sums[2 * kRowsPerBlock];
      if (b + 1 < block_end) {
        OneRowTwoBlocks(xt, packed + b * block_elems, packed + (b + 1) * block_elems, pairs,
                        sums);
        put(0, b + 1, sums + kRowsPerBlock);
      } else {
        RunBlock<1, Ahead::kThisBlock>(xt, packed + b * block_elems, pairs, Side{}, sums);
      }
      put(0, b, sums);
    }
    return;
  }
  const bool multi = plan.span > 1;
  const size_t singles = plan.tiles.size() - (multi ? 1 : 0);
  const int64_t single_rows = multi ? plan.tiles.back().first : g;
  // The side stream, where a block gets two passes or more (g >= 7): the run's weight asked
  // for one block ahead of the passes, at the rate they compute (a block's lines per g rows
  // of passes), so memory streams through every pass, the multi-block tile's included.
  // Asking for the whole next block in one pass left memory idle in the others (the 8-row
  // GEMMs ran at 71-75% of the FMA peak; this made them 1.04-1.08x). A run's first block
  // streams itself; the stream stops at the run's end. A step is at most 64 bytes a column
  // pair, so no line is skipped: a pass of r rows over s blocks asks for 64·r·s/g (two
  // blocks take 3 rows with g >= 9, three blocks 2 rows with g >= 7). With one pass a block
  // (4-6 rows) that pass streams its block alone: the side stream made those 0.90-0.97x
  // (on Zen 2 a T1 prefetch fills L1 too). With no one-block tile (g = 2 or 3) the
  // two-block tile streams its blocks itself.
  const bool streams = singles + (multi ? 1 : 0) >= 2;
  const int64_t block_bytes = block_elems * static_cast<int64_t>(sizeof(uint16_t));
  const char* const run = reinterpret_cast<const char*>(packed + block_begin * block_elems);
  const int64_t run_bytes = (block_end - block_begin) * block_bytes;
  int64_t units = 0;  // rows × blocks of the run's passes so far
  auto side_stream = [&](int64_t pass_units) {
    if (!streams) return Side{};
    auto at = [&](int64_t u) { return std::min(block_bytes + u * block_bytes / g, run_bytes); };
    const int64_t from = at(units), to = at(units + pass_units);
    units += pass_units;
    // Rounded up (at most 64: a pass's share is at most a block), so the pass covers its
    // share, but not past the run.
    const int64_t step = std::min((to - from + pairs - 1) / pairs, (run_bytes - from) / pairs);
    return to > from ? Side{run + from, step} : Side{};
  };
  // A pass that takes its share of the side stream; the first of a block streams it too.
  auto pass_on_stream = [&](bool first_of_block, int64_t blocks, int rows, const float* xi,
                            const uint16_t* first, float* const* sums) {
    const Side side = side_stream(blocks * rows);
    const bool ask = side.from != nullptr;
    if (first_of_block && ask) {
      RunPass<Ahead::kThisAndSide>(blocks, rows, xi, first, block_elems, pairs, side, sums);
    } else if (first_of_block) {
      RunPass<Ahead::kThisBlock>(blocks, rows, xi, first, block_elems, pairs, side, sums);
    } else if (ask) {
      RunPass<Ahead::kSide>(blocks, rows, xi, first, block_elems, pairs, side, sums);
    } else {
      RunPass<Ahead::kNone>(blocks, rows, xi, first, block_elems, pairs, side, sums);
    }
  };
  for (int64_t b = block_begin; b < block_end; ++b) {
    const uint16_t* blk = packed + b * block_elems;
    for (size_t t = 0; t < singles; ++t) {
      const auto [i, rows] = plan.tiles[t];
      float* const sums = block_sums + i * kRowsPerBlock;
      pass_on_stream(t == 0, 1, rows, xt + i * k_pad, blk, &sums);
    }
    for (int64_t i = 0; i < single_rows; ++i) {
      put(i, b, block_sums + i * kRowsPerBlock);
    }
    if (!multi) continue;
    // The multi-block tile runs at the last block of each group of `span` blocks in the
    // run, over the group (streaming its blocks if it is the only tile); the run's last
    // group may be shorter.
    const int64_t blocks = (b - block_begin) % plan.span + 1;
    if (blocks < plan.span && b + 1 < block_end) continue;
    const auto [i, rows] = plan.tiles.back();
    const float* xi = xt + i * k_pad;
    const uint16_t* first = blk - (blocks - 1) * block_elems;
    float earlier[2][kMaxTwoBlockRows * kRowsPerBlock];  // the group's blocks before b
    float* sums[3] = {earlier[0], earlier[1], nullptr};
    sums[blocks - 1] = block_sums + i * kRowsPerBlock;
    if (singles == 0) {
      RunPass<Ahead::kThisBlock>(blocks, rows, xi, first, block_elems, pairs, Side{}, sums);
    } else {
      pass_on_stream(false, blocks, rows, xi, first, sums);
    }
    for (int64_t j = 0; j < blocks; ++j) {
      for (int r = 0; r < rows; ++r) put(i + r, b - blocks + 1 + j, sums[j] + r * kRowsPerBlock);
    }
  }
}

}  // namespace

void MatMul(const float* x, int64_t m, const uint16_t* packed, int64_t n_out, int64_t k,
            float* y, bool accumulate) {
  if (m <= 0) return;
  const int64_t k_pad = PaddedCols(k);
  // Row groups as even as they go (300 rows: 150 and 150, not 256 and 44): each pass over
  // the weight then has rows enough to keep the FMA pipes busy.
  const int64_t groups = (m + kRowGroup - 1) / kRowGroup;
  const int64_t group = (m + groups - 1) / groups;
  // The group's x as PrepareTiles lays it out, [group, k_pad], kept per calling thread
  // between calls (grown, never shrunk: at most kRowGroup rows, 11 MiB at k = 11008), so a
  // call does not fault in fresh pages. The kernels load unaligned.
  thread_local std::vector<float> xt_scratch;
  if (static_cast<int64_t>(xt_scratch.size()) < group * k_pad) {
    xt_scratch.resize(static_cast<size_t>(group * k_pad));
  }
  float* xt = xt_scratch.data();
  for (int64_t g0 = 0; g0 < m; g0 += group) {
    const int64_t g = std::min(group, m - g0);
    const TilePlan plan = PlanTiles(g);
    // x rounded and laid out once a group, its tiles shared out between the compute
    // threads (prepared by each thread for each run of blocks it took, it had cost 7-9% of
    // the GEMM's time at 8-32 rows).
    ParallelRanges(static_cast<int64_t>(plan.tiles.size()), 1, [&](int64_t t0, int64_t t1) {
      PrepareTiles(x + g0 * k, k, k_pad, plan.tiles.data() + t0, static_cast<size_t>(t1 - t0),
                   xt);
    });
    // The compute threads take runs of output blocks as they become free; every output is
    // one chain whatever the split or the pairing of blocks, so no bit moves. A run is at
    // least kShortBlockRun blocks, or fewer where a block is long (g · k_pad above
    // kRunWork / kShortBlockRun): the last run then ends near the other threads' (with runs
    // of 8, 8 blocks of a 256-row group's down projection took 3.5 ms, and a thread left
    // without one waited up to that; runs sized by work made it 1.04-1.05x at 32-512 rows).
    const int64_t min_run =
        std::clamp<int64_t>((kRunWork + g * k_pad - 1) / (g * k_pad), 1, kShortBlockRun);
    ParallelChunks(PaddedRows(n_out) / kRowsPerBlock, min_run, CpuThreads(),
                   [&](int64_t begin, int64_t end) {
                     GroupBlocks(xt, g, plan, packed, n_out, k, y + g0 * n_out, accumulate,
                                 begin, end);
                   });
  }
}

double CachedPassFlops(int rows, int blocks, int64_t k, int64_t repeats) {
  const bool known = (blocks == 1 && rows >= 1 && rows <= kTileRows) ||
                     (blocks == 2 && rows >= 1 && rows <= kMaxTwoBlockRows) ||
                     (blocks == 3 && rows == 2);
  if (!known || k < 1 || repeats < 1) return 0;
  constexpr int kBlocks = 6;
  const int64_t k_pad = PaddedCols(k), pairs = k_pad / 2;
  const int64_t block_elems = kRowsPerBlock * k_pad;
  const std::vector<uint16_t> w(static_cast<size_t>(kBlocks * block_elems), 0x3f80);  // 1.0
  const std::vector<float> x(static_cast<size_t>(rows * k_pad), 0.5f);
  std::vector<float> sums(static_cast<size_t>(3 * kTileRows * kRowsPerBlock));
  float* const s[3] = {sums.data(), sums.data() + kTileRows * kRowsPerBlock,
                       sums.data() + 2 * kTileRows * kRowsPerBlock};
  auto all_blocks = [&] {
    for (int b = 0; b + blocks <= kBlocks; b += blocks) {
      RunPass<Ahead::kNone>(blocks, rows, x.data(), w.data() + b * block_elems, block_elems,
                            pairs, Side{}, s);
    }
  };
  all_blocks();  // into cache
  const auto start = std::chrono::steady_clock::now();
  for (int64_t r = 0; r < repeats; ++r) all_blocks();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return 2.0 * rows * kRowsPerBlock * k_pad * kBlocks * static_cast<double>(repeats) / seconds;
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
