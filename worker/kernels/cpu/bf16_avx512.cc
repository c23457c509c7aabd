#include "worker/kernels/cpu/bf16_avx512.h"

#include <immintrin.h>

#include <algorithm>

namespace tpserve {
namespace bf16_avx512 {
namespace {

constexpr int64_t kBlockCols = 32;  // k per block of the layout
constexpr int kMaxRows = 8;         // rows of x per pass: 8 x 3 accumulators + 3 weights
constexpr int64_t kOwnBlockOutputs = 48;
constexpr int64_t kMaxChunkedPasses = 8;  // the most Passes::max_chunked_passes can ask

// Rows of x a pass takes: 8 x 3 sums on blocks of up to 48 outputs, 6 x 4 on 64.
int MaxRows(const bf16_amx::Layout& layout) {
  return layout.block_outputs <= kOwnBlockOutputs ? kMaxRows : 6;
}

// R rows of x (x_stride elements apart) against k_blocks k blocks of one block of 16·T
// outputs, each output's chain over them in order: from zero, or (resume) from the sums
// in out; sums to out ([R][64], row stride 64 floats). The block's own lines are left to
// the hardware prefetchers unless side.ask_ahead (Passes::ask_ahead): asking for every
// 8th line of the next k block into L1 made 1-16 rows 1.04-1.16x slower on a Zen 4, and
// 32-512 rows 1-2% slower (docs/perf.md). With a side block, bytes [side.begin,
// side.end) of each of its first side.k_blocks k blocks are asked for into L2, one k
// block at each step: weights some later pass will read, streamed from memory while this
// pass computes from cache.
struct Side {
  const char* block = nullptr;  // the first k block to stream, or none
  int64_t k_blocks = 0;         // k blocks from there (each k_block_stride apart)
  int64_t begin = 0, end = 0;   // bytes of each k block, multiples of 64
  bool ask_ahead = false;       // ask for every 8th line of the next k block into L1
};

// kTiles: layout.tiles (bf16_amx.h), which with T fixes the strides at compile time, so
// that each weight load is one base register and a displacement.
template <int R, int T, bool kTiles>
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void Rows(
    const uint16_t* x, int64_t x_stride, const uint16_t* w, bf16_amx::Layout layout,
    int64_t k_blocks, bool resume, Side side, float* out) {
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < T; ++j) {
      acc[r][j] = resume ? _mm512_loadu_ps(out + r * 64 + j * 16) : _mm512_setzero_ps();
    }
  }
  constexpr int64_t pair = kTiles ? 16 * 2 : 16 * T * 2;  // layout.pair_stride()
  constexpr int64_t tile = kTiles ? 16 * 16 * 2 : 16 * 2;  // layout.tile_stride()
  constexpr int64_t k_block_bytes = 16 * T * kBlockCols * sizeof(uint16_t);
  const uint32_t* rows[R];  // x's rows as column pairs
  for (int r = 0; r < R; ++r) rows[r] = reinterpret_cast<const uint32_t*>(x + r * x_stride);
  for (int64_t kb = 0; kb < k_blocks; ++kb) {
    const uint16_t* block = w + kb * layout.k_block_stride;
    if (side.ask_ahead) {
      const char* ahead = reinterpret_cast<const char*>(block + layout.k_block_stride);
      for (int64_t line = 0; line < k_block_bytes; line += 512) {
        _mm_prefetch(ahead + line, _MM_HINT_T0);
      }
    }
    if (kb < side.k_blocks) {
      const char* next = side.block + kb * layout.k_block_stride * sizeof(uint16_t);
      for (int64_t line = side.begin; line < side.end; line += 64) {
        _mm_prefetch(next + line, _MM_HINT_T1);
      }
    }
    const int64_t pair0 = kb * kBlockCols / 2;  // the k block's first column pair
#pragma GCC unroll 16
    for (int p = 0; p < 16; ++p) {
      __m512bh wv[T];
#pragma GCC unroll 4
      for (int j = 0; j < T; ++j) {
        wv[j] = (__m512bh)_mm512_loadu_si512(block + p * pair + j * tile);
        // Held in a register from here: else GCC reloads it for every row at some shapes
        // (Rows<3, 4>: 196 weight loads a k block, not 64; 58% of the vdpbf16ps peak in
        // cache, not 100%: bf16_avx512_benchmark --cached).
        asm("" : "+v"(wv[j]));
      }
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m512bh xv =
            (__m512bh)_mm512_set1_epi32(static_cast<int>(rows[r][pair0 + p]));
#pragma GCC unroll 4
        for (int j = 0; j < T; ++j) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], xv, wv[j]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < T; ++j) _mm512_storeu_ps(out + r * 64 + j * 16, acc[r][j]);
  }
}

using RowsFn = void (*)(const uint16_t*, int64_t, const uint16_t*, bf16_amx::Layout, int64_t,
                        bool, Side, float*);

// rows: at most MaxRows of a layout with T tiles a block.
template <int T, bool kTiles>
RowsFn PickRows(int rows) {
  if constexpr (T <= 3) {
    if (rows == 7) return &Rows<7, T, kTiles>;
    if (rows == 8) return &Rows<8, T, kTiles>;
  }
  switch (rows) {
    case 1: return &Rows<1, T, kTiles>;
    case 2: return &Rows<2, T, kTiles>;
    case 3: return &Rows<3, T, kTiles>;
    case 4: return &Rows<4, T, kTiles>;
    case 5: return &Rows<5, T, kTiles>;
    default: return &Rows<6, T, kTiles>;
  }
}

template <bool kTiles>
RowsFn PickTiles(int rows, int64_t block_outputs) {
  switch (block_outputs) {
    case 16: return PickRows<1, kTiles>(rows);
    case 32: return PickRows<2, kTiles>(rows);
    case 48: return PickRows<3, kTiles>(rows);
    default: return PickRows<4, kTiles>(rows);
  }
}

RowsFn Pick(int rows, const bf16_amx::Layout& layout) {
  return layout.tiles ? PickTiles<true>(rows, layout.block_outputs)
                      : PickTiles<false>(rows, layout.block_outputs);
}

// The passes of a block taken a chunk of plan.chunk_blocks k blocks at a time, every pass
// over one chunk before the next, each pass's sums parked in c between chunks (the same
// chains: no bit changes). Each pass asks for its share of the next chunk's lines (the
// next block's first chunk at a block's end) into L2, so that memory streams through all
// the passes, not only through the first, which alone misses the cache without it.
// passes: at most kMaxChunkedPasses.
void ChunkedBlocks(const Passes& plan, int64_t passes, const uint16_t* x_bf16, int64_t m,
                   int64_t cols, const uint16_t* packed, bf16_amx::Layout layout,
                   int64_t n_out, int64_t block_begin, int64_t block_end, float* y,
                   bool accumulate) {
  alignas(64) float c[kMaxChunkedPasses][kMaxRows * 64];  // [pass][rows][64 outputs]
  const int64_t k_blocks = cols / kBlockCols;
  const int64_t k_block_bytes = layout.block_outputs * kBlockCols * sizeof(uint16_t);
  int pass_rows[kMaxChunkedPasses];
  for (int64_t pass = 0, row = 0; pass < passes; ++pass) {
    pass_rows[pass] = static_cast<int>((m - row) / (passes - pass));
    row += pass_rows[pass];
  }
  for (int64_t block = block_begin; block < block_end; ++block) {
    const uint16_t* w = packed + block * layout.n_block_stride;
    for (int64_t kb = 0; kb < k_blocks; kb += plan.chunk_blocks) {
      const int64_t n = std::min(plan.chunk_blocks, k_blocks - kb);
      Side side;
      side.ask_ahead = plan.ask_ahead;
      if (kb + n < k_blocks) {
        side.block = reinterpret_cast<const char*>(w + (kb + n) * layout.k_block_stride);
        side.k_blocks = std::min(n, k_blocks - kb - n);
      } else if (block + 1 < block_end) {
        side.block = reinterpret_cast<const char*>(w + layout.n_block_stride);
        side.k_blocks = std::min(n, k_blocks);
      }
      for (int64_t pass = 0, row = 0; pass < passes; ++pass) {
        side.begin = k_block_bytes * pass / passes / 64 * 64;
        side.end = k_block_bytes * (pass + 1) / passes / 64 * 64;
        Pick(pass_rows[pass], layout)(
            x_bf16 + row * cols + kb * kBlockCols, cols, w + kb * layout.k_block_stride,
            layout, n, /*resume=*/kb > 0, side, c[pass]);
        row += pass_rows[pass];
      }
    }
    const int64_t col = block * layout.block_outputs;
    const int64_t width = std::min(layout.block_outputs, n_out - col);
    for (int64_t pass = 0, row = 0; pass < passes; ++pass) {
      bf16_amx::StoreSums(c[pass], 64, pass_rows[pass], row, col, width, n_out, y,
                          accumulate);
      row += pass_rows[pass];
    }
  }
}

}  // namespace

bf16_amx::Layout BlocksLayout(int64_t k) {
  constexpr int64_t b = kOwnBlockOutputs;
  return bf16_amx::Layout{b, kBlockCols * b, bf16_amx::PaddedCols(k) * b, /*tiles=*/false};
}

int64_t BlocksElements(int64_t n_out, int64_t k) {
  const bf16_amx::Layout layout = BlocksLayout(k);
  return bf16_amx::NumBlocks(n_out, layout) * layout.n_block_stride;
}

void PackBlocks(const uint16_t* w, int64_t n_out, int64_t k, uint16_t* out,
                int64_t block_begin, int64_t block_end) {
  bf16_amx::PackLayout(w, n_out, k, BlocksLayout(k), out, block_begin, block_end);
}

bool Available() {
  static const bool available =
      __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw");
  return available;
}

void MatMulBlocks(const uint16_t* x_bf16, int64_t m, int64_t k, const uint16_t* packed,
                  bf16_amx::Layout layout, int64_t n_out, int64_t block_begin,
                  int64_t block_end, float* y, bool accumulate) {
  MatMulBlocksIn(Passes(), x_bf16, m, k, packed, layout, n_out, block_begin, block_end, y,
                 accumulate);
}

void MatMulBlocksIn(Passes plan, const uint16_t* x_bf16, int64_t m, int64_t k,
                    const uint16_t* packed, bf16_amx::Layout layout, int64_t n_out,
                    int64_t block_begin, int64_t block_end, float* y, bool accumulate) {
  const int64_t cols = bf16_amx::PaddedCols(k);
  const int64_t k_blocks = cols / kBlockCols;
  // Rows in passes as even as they go (13 rows on 64-output blocks: 5, 4, 4).
  const int64_t passes = (m + MaxRows(layout) - 1) / MaxRows(layout);
  const int64_t k_block_bytes = layout.block_outputs * kBlockCols * sizeof(uint16_t);
  if (plan.chunk_blocks > 0 && passes >= 2 && m >= plan.min_chunked_rows &&
      passes <= std::min<int64_t>(plan.max_chunked_passes, kMaxChunkedPasses)) {
    ChunkedBlocks(plan, passes, x_bf16, m, cols, packed, layout, n_out, block_begin,
                  block_end, y, accumulate);
    return;
  }
  alignas(64) float c[kMaxRows * 64];  // [rows][64 outputs]
  // Each pass over the whole block. With three passes or more, pass p of P asks for the
  // p-th P-th of each k block of the next output block, so that its first pass finds its
  // weights in L2 (1.05-1.1x at 16-64 rows: docs/perf.md).
  for (int64_t block = block_begin; block < block_end; ++block) {
    const uint16_t* w = packed + block * layout.n_block_stride;
    const int64_t col = block * layout.block_outputs;
    const int64_t width = std::min(layout.block_outputs, n_out - col);
    for (int64_t pass = 0, row = 0; pass < passes; ++pass) {
      const int rows = static_cast<int>((m - row) / (passes - pass));
      Side side;
      side.ask_ahead = plan.ask_ahead;
      if (passes >= 3 && block + 1 < block_end) {
        side.block = reinterpret_cast<const char*>(w + layout.n_block_stride);
        side.k_blocks = k_blocks;
        side.begin = k_block_bytes * pass / passes / 64 * 64;
        side.end = k_block_bytes * (pass + 1) / passes / 64 * 64;  // the last: the whole
      }
      Pick(rows, layout)(x_bf16 + row * cols, cols, w, layout, k_blocks, /*resume=*/false,
                         side, c);
      bf16_amx::StoreSums(c, 64, rows, row, col, width, n_out, y, accumulate);
      row += rows;
    }
  }
}

}  // namespace bf16_avx512
}  // namespace tpserve
