// The bf16-weight GEMM kernel for CPUs with AVX512-BF16 but no AMX (AMD Zen 4, Intel
// Cooper Lake): y = x · wᵀ with vdpbf16ps on a weight in the blocks bf16_amx.h describes,
// so that a row of y has the same bits whatever other rows share the call, which oneDNN's
// own matmul does not give (its k blocking follows the row count). The weight is packed
// by PackBlocks in blocks of 48 outputs (what MatMulBf16 packs on such CPUs), or by
// oneDNN in its blocks of 64 (or 48), which the kernel reads as well.
//
// Each output is one chain of vdpbf16ps over k in order, two columns per step, from zero:
// 16 outputs per vector lane set, x's column pair broadcast; rows of x run 1 to 8 at a
// time on 48-output blocks (8 x 3 accumulators fill the registers) and 1 to 6 on 64 (6 x
// 4), and the row count only changes how many chains share a pass over the weight, never
// a chain. So a decode batch of up to 8 rows reads each weight line once, in one pass;
// on 64-output blocks 7-8 rows take two, the second from L2 after the first's stream
// (1.16-1.28x the time of one pass over 48-output blocks: docs/perf.md).
//
// Numerics: x rounded to bf16 (bf16_amx::PrepareX), the pair's products added in the
// instruction's fixed order in fp32, bf16 subnormals as zero; y = sum, or y_old + sum
// when accumulating. With two or three passes a block (9-24 rows on 48-output blocks)
// a block takes its passes a chunk of k at a time, each pass's sums parked between
// chunks, and every pass asks for its share of the next chunk's weights: memory streams
// while the later passes compute from cache (Passes). With one pass, or four and more,
// each pass goes over the whole block; from three passes each also asks for its share of
// the next block's weights into L2, so that the next block's first pass computes from
// L2. Neither the order nor the prefetches change a bit.
#ifndef TPSERVE_WORKER_KERNELS_CPU_BF16_AVX512_H_
#define TPSERVE_WORKER_KERNELS_CPU_BF16_AVX512_H_

#include <cstdint>

#include "worker/kernels/cpu/bf16_amx.h"

namespace tpserve {
namespace bf16_avx512 {

// True when the CPU has AVX512-BF16 (and AVX512-BW).
bool Available();

// The kernel's own layout: oneDNN's pair-interleaved blocks (Layout::tiles false) of 48
// outputs, zero-padded, for a weight of k columns; BlocksElements its size. PackBlocks
// writes output blocks [block_begin, block_end) of NumBlocks(n_out, BlocksLayout(k)) from
// w ([n_out, k] bf16 bits, HF's order), so threads may share the work.
bf16_amx::Layout BlocksLayout(int64_t k);
int64_t BlocksElements(int64_t n_out, int64_t k);
void PackBlocks(const uint16_t* w, int64_t n_out, int64_t k, uint16_t* out,
                int64_t block_begin, int64_t block_end);

// Output blocks [block_begin, block_end) of y = x_bf16 · wᵀ (y += if accumulate), on the
// calling thread, as bf16_amx::MatMulBlocks: x_bf16 from bf16_amx::PrepareX. Needs
// Available().
void MatMulBlocks(const uint16_t* x_bf16, int64_t m, int64_t k, const uint16_t* packed,
                  bf16_amx::Layout layout, int64_t n_out, int64_t block_begin,
                  int64_t block_end, float* y, bool accumulate);

// How MatMulBlocks orders a block's passes: where a call has min_chunked_rows rows or
// more and a block takes at most max_chunked_passes passes (at most 8), all of them go
// over each chunk of chunk_blocks k blocks (32 columns each) before the next chunk;
// otherwise (or with chunk_blocks 0) each pass goes over the whole block in turn.
// MatMulBlocks uses the defaults; benchmarks compare others through MatMulBlocksIn. The
// defaults, from bf16_avx512_benchmark on Zen 4 (docs/perf.md), weights on huge pages:
// on the kernel's own 48-output blocks two passes (9-16 rows) 1.03-1.15x faster than
// whole passes, three (17-24) within 2% of them, four no faster. On oneDNN's 64-output
// blocks (run only when forced: bf16_gemm.h) three passes (13-18 rows) were 1.05-1.14x
// faster, two (7-12) up to 1.2x slower whenever memory ran fast and faster in slow
// spells; chunks of 2-8 k blocks slower than 16 there. Neither the order nor ask_ahead
// changes a bit.
struct Passes {
  int64_t chunk_blocks = 16;  // 48 KiB of a 48-output block
  int64_t max_chunked_passes = 3;
  // Each pass also asks for every 8th line of its next k block into L1, as the kernel
  // did until 2026-12-06: slower on a Zen 4 (docs/perf.md), kept for benchmarks.
  bool ask_ahead = false;
  int64_t min_chunked_rows = 9;
};
void MatMulBlocksIn(Passes plan, const uint16_t* x_bf16, int64_t m, int64_t k,
                    const uint16_t* packed, bf16_amx::Layout layout, int64_t n_out,
                    int64_t block_begin, int64_t block_end, float* y, bool accumulate);

}  // namespace bf16_avx512
}  // namespace tpserve

#endif  // TPSERVE_WORKER_KERNELS_CPU_BF16_AVX512_H_
