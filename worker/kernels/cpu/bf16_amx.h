// The bf16-weight GEMM kernel for CPUs with AMX (Intel Sapphire Rapids and later):
// y = x · wᵀ on a weight packed in oneDNN's BA16a64b2a blocks (by oneDNN, or tile by tile
// by PackTiles), with the tile instructions (TDPBF16PS) for every row count, so that a
// row of y has the same bits whatever other rows share the call.
//
// Why not oneDNN's own matmul for every call: its brgemm picks a k blocking per row count,
// so one row of x got different low bits at different row counts (on this project's AMX
// host, oneDNN 2.6.3; bf16_amx_test shows it) — a request's logits depended on how many
// other sequences its step carried. Here every row is one 16-row tile row whose sum runs over
// the 32-column blocks of k in order, from zero, whatever m is; rows past m are zeros.
// It also streams a batch-1 weight faster than oneDNN's call does (docs/perf.md).
//
// Layout: the weight's [k, n_out] matrix (HF's [n_out, k] read transposed) in blocks of
// 32 k × B outputs (B = 64, or 48 for some small weights), zero-padded to whole blocks;
// block (kb, nb) starts at kb · k_block_stride + nb · n_block_stride elements and holds
// [16 column pairs][B outputs][2 columns], so 16 rows B · 4 bytes apart form one AMX B
// tile of 16 outputs.
//
// Numerics: x is rounded to bf16 (nearest even, as oneDNN's reorder does), each tile
// product pair is accumulated in fp32 by the hardware (bf16 subnormals count as zero),
// and y = sum, or y_old + sum when accumulating.
#ifndef TPSERVE_WORKER_KERNELS_CPU_BF16_AMX_H_
#define TPSERVE_WORKER_KERNELS_CPU_BF16_AMX_H_

#include <cstddef>
#include <cstdint>

namespace tpserve {
namespace bf16_amx {

// True when the CPU has AMX-TILE and AMX-BF16 and the kernel lets this process use the
// tile registers (arch_prctl(ARCH_REQ_XCOMP_PERM), asked once on the first call).
bool Available();

// Every tile register 16 rows of 64 bytes, for the calling thread: the configuration
// MatMulBlocks (which sets it itself) and the attention kernel (attention_amx.h) run
// under. ReleaseTiles() when done. Both need Available().
void ConfigureTiles();
void ReleaseTiles();

struct Layout {
  int64_t block_outputs = 64;  // outputs per block: 16, 32, 48 or 64 (oneDNN: 48 or 64)
  int64_t k_block_stride = 0;  // elements from block (kb, nb) to (kb + 1, nb)
  int64_t n_block_stride = 0;  // elements from block (kb, nb) to (kb, nb + 1)
  // false: a block is [16 column pairs][B outputs][2] (oneDNN's BA16a<B>b2a); true, tile
  // by tile: [B / 16 tiles][16 column pairs][16 outputs][2], so that each AMX B tile is
  // 1 KiB in one piece (PackTiles; loaded faster than 16 rows B · 4 bytes apart).
  bool tiles = false;
  // Elements from a block's first 16 outputs to its next 16, and from one column pair's
  // outputs to the next pair's within those 16.
  int64_t tile_stride() const { return tiles ? 16 * 16 * 2 : 16 * 2; }
  int64_t pair_stride() const { return tiles ? 16 * 2 : block_outputs * 2; }
  bool valid() const;
};

// w ([n_out, k] bf16 bits, HF's order) packed into `out` in blocks of 64 outputs, tile by
// tile (Layout::tiles), zero-padded: TilesLayout(k) describes it, TilesElements its
// size. What MatMulBf16 packs on AMX CPUs. PackTiles writes output blocks [block_begin,
// block_end) of NumBlocks(n_out, TilesLayout(k)), so threads may share the work.
Layout TilesLayout(int64_t k);
int64_t TilesElements(int64_t n_out, int64_t k);
void PackTiles(const uint16_t* w, int64_t n_out, int64_t k, uint16_t* out, int64_t block_begin,
               int64_t block_end);

// w ([n_out, k] bf16 bits, HF's order) into output blocks [block_begin, block_end) of any
// valid `layout` (pair-interleaved or tile by tile), zero-padded: `out` holds
// NumBlocks(n_out, layout) · layout.n_block_stride elements. PackTiles and
// bf16_avx512::PackBlocks are it on their layouts.
void PackLayout(const uint16_t* w, int64_t n_out, int64_t k, const Layout& layout,
                uint16_t* out, int64_t block_begin, int64_t block_end);

// Output blocks (the unit of the work split between threads).
int64_t NumBlocks(int64_t n_out, const Layout& layout);

// Rows of x in one tile: PaddedRows' unit.
inline constexpr int64_t kTileRows = 16;

// x rounded to bf16 in the kernel's layout: [PaddedRows(m), PaddedCols(k)], zero-padded.
int64_t PaddedRows(int64_t m);
int64_t PaddedCols(int64_t k);
// x: [m, k] fp32 -> out: PaddedRows(m) * PaddedCols(k) bf16 bits.
void PrepareX(const float* x, int64_t m, int64_t k, uint16_t* out);

// Output blocks [block_begin, block_end) of y = x_bf16 · wᵀ (y += if accumulate), on the
// calling thread: x_bf16 from PrepareX, packed the weight in Layout, y [m, n_out]. Needs
// Available(). Past 64 k steps (k > 2,048) and 16 rows, the row groups pass over a block a
// chunk of k at a time, so that the chunk stays in L2 while they do; each group's sums are
// parked in a buffer of the thread's between chunks and loaded back into the tiles, so
// every sum is the same as in one pass. With k in one chunk and more than 1 MiB of x (256
// rows at k = 2,048), the rows are taken in even chunks of whole groups, each passing over
// every block of the range, so that x's chunk stays in L2 too. A group's sums reach y
// through a staging buffer of the thread's, copied there while the next group computes.
void MatMulBlocks(const uint16_t* x_bf16, int64_t m, int64_t k, const uint16_t* packed,
                  Layout layout, int64_t n_out, int64_t block_begin, int64_t block_end,
                  float* y, bool accumulate);

// y[row0 + r][col .. col + width) = (or +=, if accumulate) sums[r][0 .. width), r < rows;
// sums' rows `sums_stride` floats apart. Both kernels' last step for a block.
void StoreSums(const float* sums, int64_t sums_stride, int64_t rows, int64_t row0, int64_t col,
               int64_t width, int64_t n_out, float* y, bool accumulate);

// Flops per second of `iterations` x 4 TDPBF16PS on this thread with every operand in
// tile registers: the tile unit's peak, for benchmarks to put the kernel beside. Needs
// Available().
double PeakTileFlops(int64_t iterations);

// Flops per second of the kernel's own inner loop (OneGroup over a 64-output block: one x
// tile and four weight tiles a k step, four TDPBF16PS) `repeats` times over 32 k steps,
// with its operands in cache: `weights_in_l1` false, a 128 KiB weight block and 32 KiB of
// x (L2); true, one 4 KiB weight step read by every step and 3 KiB of x (L1). Beside
// PeakTileFlops it shows what loading tiles from each cache level leaves of the tile
// unit's rate on this core. Needs Available().
double CachedTileLoopFlops(bool weights_in_l1, int64_t repeats);

}  // namespace bf16_amx
}  // namespace tpserve

#endif  // TPSERVE_WORKER_KERNELS_CPU_BF16_AMX_H_
