// The int8-weight GEMM kernel for CPUs with AVX512-VNNI (int8_gemm.h): y = xq · qᵀ for
// x quantized to int16 (QuantizeRowToInt16) and an int8 weight in pair-interleaved blocks
// of 48 outputs, each 16-output vector lane set summing its outputs' products with
// vpdpwssd while x's column pair is broadcast: 8 rows x 3 vectors of sums fill the
// registers, so a decode batch of 1-8 rows reads each weight line once, and no sum is
// ever reduced across lanes.
//
// Layout: block b holds outputs [48·b, 48·b + 48), one line of 96 bytes per column pair
// p: (q[o][2p], q[o][2p + 1]) for o = 0..47 in turn, the lines in column order, the block
// [k_pad / 2, 48, 2] contiguous; blocks follow each other. Zero-padded to whole blocks
// and to k_pad columns (a multiple of 32).
//
// Numerics: int8_gemm.h's chunk sums. Each output's products over a chunk of kChunkCols
// columns are summed exactly in an int32 lane, converted to fp32 once, and the chunks'
// sums added in column order from 0: exactly the value any other order of the integer
// adds gives (the AVX2 kernel's across lanes), so the bits depend on neither the kernel
// nor the rows sharing the call.
#ifndef TPSERVE_WORKER_KERNELS_CPU_INT8_AVX512_H_
#define TPSERVE_WORKER_KERNELS_CPU_INT8_AVX512_H_

#include <cstdint>

#include "absl/functional/function_ref.h"

namespace tpserve {
namespace int8_avx512 {

constexpr int64_t kBlockOutputs = 48;
// Columns whose products a lane sums exactly in int32 before they go to fp32: each
// vpdpwssd adds at most 2 · 32767 · 127 to a lane, so 256 column pairs stay below 2³¹.
constexpr int64_t kChunkCols = 512;
static_assert(kChunkCols * 32767 * 127 < (int64_t{1} << 31), "an int32 lane must not overflow");

// True when the CPU has AVX512-VNNI (and AVX512-BW).
bool Available();

// Where weight (row, col) lives in a layout of k_pad columns.
inline int64_t Offset(int64_t row, int64_t col, int64_t k_pad) {
  return row / kBlockOutputs * kBlockOutputs * k_pad + col / 2 * kBlockOutputs * 2 +
         row % kBlockOutputs * 2 + col % 2;
}

// For output blocks [block_begin, block_end) of packed, one block after another on the
// calling thread: the sums of m rows of xq ([m, k_pad] int16, row stride k_pad) against
// the block's 48 outputs, sums[i · 48 + o] = Σ_chunks fp32(Σ_{c in chunk} xq[row0 + i][c]
// · q[48·block + o][c]), handed to store(block, row0, rows, sums) a pass at a time. Rows
// go 1-8 to a pass over a block, as evenly as they divide. Needs Available().
using StoreSums =
    absl::FunctionRef<void(int64_t block, int64_t row0, int rows, const float* sums)>;
void MatMulBlocks(const int16_t* xq, int64_t m, int64_t k_pad, const int8_t* packed,
                  int64_t block_begin, int64_t block_end, StoreSums store);

// How MatMulBlocks runs a pass: one of min_rows_ahead rows or more asks for the weight
// lines 16 column pairs (1.5 KiB) on into L1 as it goes. MatMulBlocks uses the default,
// from int8_avx512_benchmark on a Zen 4 (docs/perf.md): there 8 rows take 0.85-0.87x
// the time when they ask, 7 rows 0.93-0.95x, 6 rows the same, and 1-5 rows, which the
// hardware prefetchers keep fed, 1.04-1.08x (two threads; one thread 1.18-1.23x).
// Benchmarks compare others through MatMulBlocksIn. No plan changes a bit.
struct Plan {
  int min_rows_ahead = 6;
};
void MatMulBlocksIn(Plan plan, const int16_t* xq, int64_t m, int64_t k_pad,
                    const int8_t* packed, int64_t block_begin, int64_t block_end,
                    StoreSums store);

}  // namespace int8_avx512
}  // namespace tpserve

#endif  // TPSERVE_WORKER_KERNELS_CPU_INT8_AVX512_H_
