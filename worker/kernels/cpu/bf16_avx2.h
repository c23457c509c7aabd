// The bf16-weight GEMM kernel for CPUs where oneDNN has no prepacked bf16 matmul (no
// AVX512-BF16: AVX2 hosts such as AMD Zen 2/3 or Intel before Cooper Lake). y = x · wᵀ
// with the weight in bf16, widened in registers (a bf16 is the top half of an fp32, so
// one shift or one mask per 8 weights), multiplied with x in fp32 by FMA.
//
// Layout (PackBlocked): blocks of kRowsPerBlock = 16 output rows; within a block, for
// each pair of columns (2p, 2p + 1), the 16 rows' two bf16 side by side (row j's in the
// j-th 32-bit word: 64 bytes, one cache line, per column pair). The whole weight is one
// sequential stream; n_out is padded to a multiple of 16 and k to an even count, with
// zeros. A 32-bit word's low half shifted up is the fp32 of column 2p, its high half
// masked the fp32 of column 2p + 1, so 8 rows' weights widen with one instruction.
//
// Numerics, the same for every m and every path through the kernel (so a row of y is bit
// for bit the same whichever rows share the call): x is rounded to bf16 (nearest even),
// so each product is exact in fp32, and y[i][r] is one chain of FMAs over the columns in
// order, starting from zero: acc = fma(w[r][c], x[i][c], acc) for c = 0 .. k-1; then
// y = acc, or y_old + acc when accumulating. ReferenceDot spells the same arithmetic out
// in scalar code for the tests.
//
// The compute threads (cpu_threads.h) split a call's output blocks.
#ifndef TPSERVE_WORKER_KERNELS_CPU_BF16_AVX2_H_
#define TPSERVE_WORKER_KERNELS_CPU_BF16_AVX2_H_

#include <cstddef>
#include <cstdint>

namespace tpserve {
namespace bf16_avx2 {

constexpr int64_t kRowsPerBlock = 16;
constexpr int64_t kPairElems = 2 * kRowsPerBlock;  // bf16 per column pair of a block: 64 B
constexpr int kTileRows = 6;                       // most rows of x in a tile

int64_t PaddedRows(int64_t n_out);
int64_t PaddedCols(int64_t k);
// Bytes PackBlocked writes for an [n_out, k] weight.
size_t PackedBytes(int64_t n_out, int64_t k);

// w: [n_out, k] row-major bf16 bits -> out: PackedBytes(n_out, k) bytes, padding zeroed.
void PackBlocked(const uint16_t* w, int64_t n_out, int64_t k, uint16_t* out);
// The bf16 bits of weight (row, col) in a packed weight (tests).
uint16_t PackedAt(const uint16_t* packed, int64_t k, int64_t row, int64_t col);

// x: [n, k] fp32, 1 <= n <= kTileRows rows of x -> out: [PaddedCols(k), n], column c of row i
// at c·n + i, rounded to bf16 (nearest even; a NaN stays a NaN, made quiet), zero past k:
// how MatMul lays out a tile of x for its kernels. Writes nothing else.
void PrepareTile(const float* x, int64_t k, int n, float* out);

// x: [m, k] fp32, packed: PackBlocked's [n_out, k] -> y: [m, n_out] fp32, y = x · wᵀ
// (y += x · wᵀ if accumulate). m may be 0; sizes positive, pointers valid (the caller,
// MatMulBf16, checks them).
void MatMul(const float* x, int64_t m, const uint16_t* packed, int64_t n_out, int64_t k,
            float* y, bool accumulate);

// For benchmarks: FLOP/s of one thread running MatMul's pass of `rows` rows of x over
// `blocks` blocks at once (1 block: 1-6 rows; 2 blocks: 1-3 rows; 3 blocks: 2 rows; the
// tile plans use 1-6, 2-3 and 2) across 6 blocks of a weight with k columns, `repeats`
// times, weight and x in cache from the second time on (k = 2048: 384 KiB of weight).
// 0 for any other shape.
double CachedPassFlops(int rows, int blocks, int64_t k, int64_t repeats);

// The kernel's arithmetic for one output, in scalar code: x_row and w_row are k values
// (x already rounded to bf16, w widened), `prior` is y's old value when accumulating.
float ReferenceDot(const float* x_row, const float* w_row, int64_t k, bool accumulate,
                   float prior);

}  // namespace bf16_avx2
}  // namespace tpserve

#endif  // TPSERVE_WORKER_KERNELS_CPU_BF16_AVX2_H_
