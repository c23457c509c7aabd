#include "worker/kernels/cpu/bf16_amx.h"

// GCC 12's AVX-512 intrinsics pass an undefined vector (_mm512_undefined, a
// self-initialised variable) to their masked builtins, which -W(maybe-)uninitialized
// reports at every inlined use; nothing in this file reads an uninitialised value.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iterator>
#include <vector>

#include "worker/kernels/cpu/scratch.h"
#include "worker/kernels/cpu/transpose_avx512.h"

namespace tpserve {
namespace bf16_amx {
namespace {

constexpr int64_t kBlockCols = 32;     // k per block: one tile row of 32 bf16 (64 bytes)
constexpr int64_t kMaxBlockOutputs = 64;  // outputs per block: up to four B tiles of 16
// k steps of a block that row groups pass over at once (a chunk of 64 outputs: 256 KiB).
constexpr int64_t kMaxChunkSteps = 64;
// Bytes of x that the row groups passing over a block at once may span (256 rows at k =
// 2,048), so that they stay in L2 beside the block and the next.
constexpr int64_t kRowChunkBytes = int64_t{1} << 20;

// Linux's arch_prctl request for an XSAVE state component (asm/prctl.h), and the tile
// data's component number (XFEATURE_XTILEDATA).
constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtileData = 18;

// LDTILECFG's 64-byte operand, palette 1.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Tiles: 0 x; 2, 3 the weight; 4..7 the sums. Every tile is 16 rows of
// 64 bytes; rows of x past m are zeros (PrepareX), so one configuration serves every m.
constexpr int kTiles = 8;

}  // namespace

__attribute__((target("amx-tile"))) void ConfigureTiles() {
  TileConfig config;
  for (int t = 0; t < kTiles; ++t) {
    config.colsb[t] = 64;
    config.rows[t] = kTileRows;
  }
  // GCC 12's _tile_loadconfig does not tell the optimiser that it reads the 64 bytes, so
  // it may drop the stores above as dead (it does without -fstack-protector), leaving
  // palette 1 with no rows: the first tile instruction then faults. The empty asm reads
  // `config`, which keeps every store.
  asm volatile("" : : "m"(config));
  _tile_loadconfig(&config);
}

__attribute__((target("amx-tile"))) void ReleaseTiles() { _tile_release(); }

namespace {

bool CpuHasAmxBf16() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool amx_bf16 = (d >> 22) & 1, amx_tile = (d >> 24) & 1;
  // AVX512-BF16 (leaf 7 subleaf 1, EAX bit 5) rounds x; every AMX CPU has it, but check.
  unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
  if (!__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1)) return false;
  const bool avx512_bf16 = (a1 >> 5) & 1;
  return amx_bf16 && amx_tile && avx512_bf16 && __builtin_cpu_supports("avx512bw");
}

// A group's sums waiting in a staging buffer (16 rows, kMaxBlockOutputs floats apart) to
// be copied to their place in y, `width` floats a row, while the next group's tiles work.
// Stored straight from the tiles into y, each group's 16 rows (a line each a tile, in
// lines of y not yet in cache) held up the next group's start until they drained.
struct PendingRows {
  const float* src = nullptr;
  float* dst = nullptr;
  int64_t dst_stride = 0;  // floats
  int64_t width = 0;       // a multiple of 16
};

// StoreSums would do the same copy, but a call to memcpy per row inside the tile loop
// gave back most of the gain (timed in one process, calls alternating).
__attribute__((target("avx512f"))) inline void CopyRow(const PendingRows& p, int64_t r) {
  for (int64_t c = 0; c < p.width; c += 16) {
    _mm512_storeu_ps(p.dst + r * p.dst_stride + c,
                     _mm512_load_ps(p.src + r * kMaxBlockOutputs + c));
  }
}

// One 16-row group of x against one block of 16·T outputs: T sum tiles, one x tile,
// weight tiles alternating between 2 and 3. (Two groups at once, 2 x 2 sum tiles sharing
// each weight tile, ran slower in a scratch program.)
// The sums go to `out`, rows `out_stride` bytes apart. Each k step also asks for
// `prefetch_step` bytes from `prefetch` on into L2 (none when null): the next block; and,
// if `stream_l1`, for the next k step's weight tiles and x rows into L1, so that a pass
// reading its block from memory (the only pass, at 16 rows or fewer) finds each tile's
// rows there when it loads it. (Timed interleaved in one process on an AMX host: faster
// at 1 and 16 rows; slower at 32 rows and more, where later passes read the block from
// L2, so callers ask for it only for a single pass.) The first 16 k steps also copy the
// rows of `pending` (none when its src is null), one a step; the rest after the last step.
template <int T>
__attribute__((target("amx-tile,amx-bf16,avx512f"))) void OneGroup(
    const uint16_t* x, int64_t x_stride, const uint16_t* w, Layout layout, int64_t k_blocks,
    const float* init, int64_t init_stride, float* out, int64_t out_stride, const char* prefetch,
    int64_t prefetch_step, bool stream_l1, const PendingRows& pending) {
  static_assert(T >= 1 && T <= 4);
  const int64_t row_bytes = layout.pair_stride() * sizeof(uint16_t);  // a tile's row stride
  const int64_t tile = layout.tile_stride();
  const int64_t step_bytes = 16 * T * 16 * 2 * sizeof(uint16_t);  // one k step of the block
  if (init == nullptr) {
    _tile_zero(4);
    if (T > 1) _tile_zero(5);
    if (T > 2) _tile_zero(6);
    if (T > 3) _tile_zero(7);
  } else {  // the sums so far, parked by the call for the k steps before these
    _tile_loadd(4, init, init_stride);
    if (T > 1) _tile_loadd(5, init + 16, init_stride);
    if (T > 2) _tile_loadd(6, init + 32, init_stride);
    if (T > 3) _tile_loadd(7, init + 48, init_stride);
  }
  for (int64_t kb = 0; kb < k_blocks; ++kb) {
    const uint16_t* block = w + kb * layout.k_block_stride;
    if (pending.src != nullptr && kb < kTileRows) CopyRow(pending, kb);
    if (prefetch != nullptr) {
      const char* p = prefetch + kb * prefetch_step;
      for (int64_t b = 0; b < prefetch_step; b += 64) _mm_prefetch(p + b, _MM_HINT_T1);
    }
    if (stream_l1 && kb + 1 < k_blocks) {  // the next k step's weight and x rows, into L1
      const char* next_w = reinterpret_cast<const char*>(block + layout.k_block_stride);
      for (int64_t b = 0; b < step_bytes; b += 64) _mm_prefetch(next_w + b, _MM_HINT_T0);
      const char* next_x = reinterpret_cast<const char*>(x + (kb + 1) * kBlockCols);
      for (int r = 0; r < kTileRows; ++r) _mm_prefetch(next_x + r * x_stride, _MM_HINT_T0);
    }
    _tile_loadd(0, x + kb * kBlockCols, x_stride);
    _tile_loadd(2, block, row_bytes);
    _tile_dpbf16ps(4, 0, 2);
    if (T > 1) {
      _tile_loadd(3, block + tile, row_bytes);
      _tile_dpbf16ps(5, 0, 3);
    }
    if (T > 2) {
      _tile_loadd(2, block + 2 * tile, row_bytes);
      _tile_dpbf16ps(6, 0, 2);
    }
    if (T > 3) {
      _tile_loadd(3, block + 3 * tile, row_bytes);
      _tile_dpbf16ps(7, 0, 3);
    }
  }
  if (pending.src != nullptr) {
    for (int64_t r = k_blocks; r < kTileRows; ++r) CopyRow(pending, r);
  }
  _tile_stored(4, out, out_stride);
  if (T > 1) _tile_stored(5, out + 16, out_stride);
  if (T > 2) _tile_stored(6, out + 32, out_stride);
  if (T > 3) _tile_stored(7, out + 48, out_stride);
}

}  // namespace

bool Available() {
  static const bool available =
      CpuHasAmxBf16() && syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtileData) == 0;
  return available;
}

bool Layout::valid() const {
  return block_outputs > 0 && block_outputs <= kMaxBlockOutputs && block_outputs % 16 == 0 &&
         k_block_stride > 0 && n_block_stride > 0;
}

Layout TilesLayout(int64_t k) {
  constexpr int64_t b = kMaxBlockOutputs;
  return Layout{b, kBlockCols * b, PaddedCols(k) * b, /*tiles=*/true};
}

int64_t TilesElements(int64_t n_out, int64_t k) {
  const Layout layout = TilesLayout(k);
  return NumBlocks(n_out, layout) * layout.n_block_stride;
}

namespace {

// PackLayout with AVX-512: a tile's 16 outputs' rows of a k block (16 column pairs, a
// 32-bit lane each, the columns past k masked to zero) loaded as 16 vectors, transposed
// (Transpose16) into 16 column-pair lines of 64 bytes, each stored where the layout puts
// it. The same bytes as the scalar loop below.
__attribute__((target("avx512f,avx512bw"))) void PackLayoutAvx512(
    const uint16_t* w, int64_t n_out, int64_t k, const Layout& layout, uint16_t* out,
    int64_t block_begin, int64_t block_end) {
  const int64_t k_blocks = PaddedCols(k) / kBlockCols;
  __m512i rows[16], pairs[16];
  for (int64_t nb = block_begin; nb < block_end; ++nb) {
    for (int64_t kb = 0; kb < k_blocks; ++kb) {
      const int64_t c = kb * kBlockCols, left = std::min<int64_t>(kBlockCols, k - c);
      const __mmask32 lanes = left >= 32 ? ~__mmask32{0} : (__mmask32{1} << left) - 1;
      uint16_t* block = out + nb * layout.n_block_stride + kb * layout.k_block_stride;
      for (int64_t t = 0; t < layout.block_outputs / 16; ++t) {
        for (int64_t o = 0; o < 16; ++o) {
          const int64_t n = nb * layout.block_outputs + t * 16 + o;
          rows[o] = n < n_out ? _mm512_maskz_loadu_epi16(lanes, w + n * k + c)
                              : _mm512_setzero_si512();
        }
        Transpose16(rows, pairs);  // pairs[p]: column pair p of the 16 outputs
        uint16_t* dst = block + t * layout.tile_stride();
        for (int64_t p = 0; p < kBlockCols / 2; ++p) {
          _mm512_storeu_si512(dst + p * layout.pair_stride(), pairs[p]);
        }
      }
    }
  }
}

}  // namespace

void PackLayout(const uint16_t* w, int64_t n_out, int64_t k, const Layout& layout,
                uint16_t* out, int64_t block_begin, int64_t block_end) {
  static const bool avx512 =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  if (avx512) return PackLayoutAvx512(w, n_out, k, layout, out, block_begin, block_end);
  const int64_t k_blocks = PaddedCols(k) / kBlockCols;
  for (int64_t nb = block_begin; nb < block_end; ++nb) {
    for (int64_t kb = 0; kb < k_blocks; ++kb) {
      // Tile by tile, the k block's [tiles][16 column pairs][16 outputs][2] in order.
      uint16_t* block = out + nb * layout.n_block_stride + kb * layout.k_block_stride;
      for (int64_t t = 0; t < layout.block_outputs / 16; ++t) {
        for (int64_t p = 0; p < kBlockCols / 2; ++p) {
          const int64_t c = kb * kBlockCols + 2 * p;
          uint16_t* dst = block + t * layout.tile_stride() + p * layout.pair_stride();
          for (int64_t o = 0; o < 16; ++o, dst += 2) {
            const int64_t n = nb * layout.block_outputs + t * 16 + o;
            dst[0] = n < n_out && c < k ? w[n * k + c] : 0;  // zeros past the weight's edges
            dst[1] = n < n_out && c + 1 < k ? w[n * k + c + 1] : 0;
          }
        }
      }
    }
  }
}

void PackTiles(const uint16_t* w, int64_t n_out, int64_t k, uint16_t* out, int64_t block_begin,
               int64_t block_end) {
  PackLayout(w, n_out, k, TilesLayout(k), out, block_begin, block_end);
}

int64_t NumBlocks(int64_t n_out, const Layout& layout) {
  return (n_out + layout.block_outputs - 1) / layout.block_outputs;
}
int64_t PaddedRows(int64_t m) { return (m + kTileRows - 1) / kTileRows * kTileRows; }
int64_t PaddedCols(int64_t k) { return (k + kBlockCols - 1) / kBlockCols * kBlockCols; }

__attribute__((target("avx512f,avx512bw,avx512bf16"))) void PrepareX(const float* x, int64_t m,
                                                                     int64_t k, uint16_t* out) {
  const int64_t cols = PaddedCols(k);
  for (int64_t r = 0; r < m; ++r) {
    const float* in = x + r * k;
    uint16_t* row = out + r * cols;
    for (int64_t c = 0; c < cols; c += 32) {
      // Lanes past k load as zeros (masked), so the padding is written as +0.
      const int64_t left = std::min<int64_t>(32, std::max<int64_t>(0, k - c));
      const __mmask16 lo = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1);
      const __mmask16 hi = left >= 32 ? 0xffff : left <= 16 ? 0 : (__mmask16)((1u << (left - 16)) - 1);
      const __m512 a = _mm512_maskz_loadu_ps(lo, in + c);
      const __m512 b = _mm512_maskz_loadu_ps(hi, in + c + 16);
      // vcvtne2ps2bf16: b's 16 values land in the high half, a's in the low (nearest even).
      _mm512_storeu_si512(row + c, (__m512i)_mm512_cvtne2ps_pbh(b, a));
    }
  }
  std::memset(out + m * cols, 0, (PaddedRows(m) - m) * cols * sizeof(uint16_t));
}

__attribute__((target("amx-tile,amx-bf16,avx512f"))) void MatMulBlocks(
    const uint16_t* x_bf16, int64_t m, int64_t k, const uint16_t* packed, Layout layout,
    int64_t n_out, int64_t block_begin, int64_t block_end, float* y, bool accumulate) {
  ConfigureTiles();
  const int64_t cols = PaddedCols(k);
  const int64_t k_blocks = cols / kBlockCols;
  const int64_t x_stride = cols * sizeof(uint16_t);
  auto group = layout.block_outputs == 64   ? &OneGroup<4>
               : layout.block_outputs == 48 ? &OneGroup<3>
               : layout.block_outputs == 32 ? &OneGroup<2>
                                            : &OneGroup<1>;
  // Each block of the weight (64 outputs × k: 256 KiB at k = 2048) is read from memory
  // and stays in L2 while every row group passes over it. With more than one group,
  // the passes over a block also bring the next piece of the weight into L2, their k steps
  // sharing its bytes evenly, so that memory streams while the tiles work on L2. Past
  // kMaxChunkSteps k steps a block would not stay in L2 beside the next one and x, so the
  // passes go over it a chunk of k at a time, each group's sums parked in `sums` between
  // chunks and loaded back into the tiles: every sum still runs over k in order, from zero.
  // With k in one chunk but more rows than kRowChunkBytes of x, x would not stay in L2
  // either: the rows are taken in even chunks of whole groups, each passing over every
  // block of the range (the range's weight read again, from L3, for each later chunk).
  const int64_t groups = PaddedRows(m) / kTileRows;
  int64_t row_chunks = 1;
  if (k_blocks <= kMaxChunkSteps) {
    const int64_t most = std::max<int64_t>(1, kRowChunkBytes / (kTileRows * x_stride));
    row_chunks = std::max<int64_t>(1, groups / most);  // groups a chunk: at least `most`
  }
  const int64_t chunk_groups = (groups + row_chunks - 1) / row_chunks;
  // k chunks only with more than one group (and then the rows are in one chunk).
  const int64_t chunks = groups > 1 ? (k_blocks + kMaxChunkSteps - 1) / kMaxChunkSteps : 1;
  const int64_t chunk_steps = (k_blocks + chunks - 1) / chunks;
  const int64_t step_bytes = layout.k_block_stride * sizeof(uint16_t);
  // One group's sums, or with k in chunks every group's.
  thread_local Scratch<float> sums_store;
  const int64_t sums_stride = kMaxBlockOutputs;
  float* sums = sums_store.Get((chunks > 1 ? chunk_groups : 1) * kTileRows * sums_stride);
  // A group bound for y is stored to one half of `staging` and copied to y during the next
  // group's pass (PendingRows), while the following group stores to the other half.
  thread_local Scratch<float> staging_store;
  float* staging = staging_store.Get(2 * kTileRows * kMaxBlockOutputs);
  int64_t half = 0;
  PendingRows pending;
  for (int64_t g0 = 0; g0 < groups; g0 += chunk_groups) {
    const int64_t row_begin = g0 * kTileRows;
    const int64_t row_end = std::min(m, (g0 + chunk_groups) * kTileRows);
    const int64_t passes = std::min(chunk_groups, groups - g0);
    for (int64_t block = block_begin; block < block_end; ++block) {
      const uint16_t* w = packed + block * layout.n_block_stride;
      const int64_t col = block * layout.block_outputs;
      const bool full_width = col + layout.block_outputs <= n_out;
      for (int64_t chunk = 0; chunk < chunks; ++chunk) {
        const int64_t kb = chunk * chunk_steps;
        const int64_t steps = std::min(chunk_steps, k_blocks - kb);
        const bool last = chunk + 1 == chunks;
        // The next piece: this block's next chunk, or the next block's first.
        const char* next = nullptr;
        int64_t next_steps = 0;
        if (passes > 1 && !last) {
          next = reinterpret_cast<const char*>(w + (kb + steps) * layout.k_block_stride);
          next_steps = std::min(chunk_steps, k_blocks - kb - steps);
        } else if (passes > 1 && block + 1 < block_end) {
          next = reinterpret_cast<const char*>(w + layout.n_block_stride);
          next_steps = chunk_steps;
        }
        const int64_t next_lines = next_steps * step_bytes / 64;
        const int64_t prefetch_step = (next_lines + passes * steps - 1) / (passes * steps) * 64;
        for (int64_t row = row_begin; row < row_end; row += kTileRows) {
          const uint16_t* x_group = x_bf16 + row * cols + kb * kBlockCols;
          const int64_t pass = (row - row_begin) / kTileRows;
          const char* prefetch = next == nullptr ? nullptr : next + pass * steps * prefetch_step;
          float* parked = sums + (chunks > 1 ? pass * kTileRows * sums_stride : 0);
          const float* init = chunk == 0 ? nullptr : parked;
          if (last && !accumulate && full_width && row + kTileRows <= m) {  // bound for y
            float* staged = staging + half * kTileRows * kMaxBlockOutputs;
            half ^= 1;
            group(x_group, x_stride, w + kb * layout.k_block_stride, layout, steps, init,
                  sums_stride * sizeof(float), staged, kMaxBlockOutputs * sizeof(float),
                  prefetch, prefetch_step, passes == 1, pending);
            pending = PendingRows{staged, y + row * n_out + col, n_out, layout.block_outputs};
            continue;
          }
          group(x_group, x_stride, w + kb * layout.k_block_stride, layout, steps, init,
                sums_stride * sizeof(float), parked, sums_stride * sizeof(float), prefetch,
                prefetch_step, passes == 1, pending);
          pending = PendingRows{};
          if (last) {
            StoreSums(parked, sums_stride, std::min(kTileRows, m - row), row, col,
                      std::min(layout.block_outputs, n_out - col), n_out, y, accumulate);
          }
        }
      }
    }
  }
  if (pending.src != nullptr) {
    for (int64_t r = 0; r < kTileRows; ++r) CopyRow(pending, r);
  }
  _tile_release();
}

void StoreSums(const float* sums, int64_t sums_stride, int64_t rows, int64_t row0, int64_t col,
               int64_t width, int64_t n_out, float* y, bool accumulate) {
  for (int64_t r = 0; r < rows; ++r) {
    float* out = y + (row0 + r) * n_out + col;
    const float* in = sums + r * sums_stride;
    if (accumulate) {
      for (int64_t j = 0; j < width; ++j) out[j] += in[j];
    } else {
      std::memcpy(out, in, width * sizeof(float));
    }
  }
}

__attribute__((target("amx-tile,amx-bf16"))) double PeakTileFlops(int64_t iterations) {
  ConfigureTiles();
  alignas(64) uint16_t ones[kTileRows * kBlockCols];
  std::fill(std::begin(ones), std::end(ones), uint16_t{0x3f80});  // bf16 1.0
  _tile_loadd(0, ones, 64);
  _tile_loadd(1, ones, 64);
  _tile_loadd(2, ones, 64);
  _tile_loadd(3, ones, 64);
  _tile_zero(4);
  _tile_zero(5);
  _tile_zero(6);
  _tile_zero(7);
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < iterations; ++i) {  // four independent sums
    _tile_dpbf16ps(4, 0, 2);
    _tile_dpbf16ps(5, 0, 3);
    _tile_dpbf16ps(6, 1, 2);
    _tile_dpbf16ps(7, 1, 3);
  }
  alignas(64) float sums[kTileRows * 16];
  _tile_stored(4, sums, 64);  // the loop's result is used
  _tile_release();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double flops_per_tile_product = 2.0 * kTileRows * 16 * kBlockCols;
  return sums[0] < 0 ? 0 : 4 * iterations * flops_per_tile_product / seconds;
}

double CachedTileLoopFlops(bool weights_in_l1, int64_t repeats) {
  constexpr int64_t kSteps = 32;  // k = 1,024
  constexpr int64_t kOutputs = 64;
  const int64_t step_elems = kBlockCols * kOutputs;  // one k step of the block: 4 KiB
  // L1: every step reads the same weight step, and an x tile whose 1 KiB window moves 64
  // bytes a step (3 KiB of x in all); L2: the block's 32 steps and 16 rows of 1,024 columns.
  const int64_t x_stride = weights_in_l1 ? 64 : kSteps * kBlockCols * sizeof(uint16_t);
  std::vector<uint16_t> w_store((weights_in_l1 ? 1 : kSteps) * step_elems + 32, 0x3f80);
  std::vector<uint16_t> x_store(kTileRows * kSteps * kBlockCols + 32, 0x3f80);
  auto align64 = [](uint16_t* p) {
    return reinterpret_cast<uint16_t*>((reinterpret_cast<uintptr_t>(p) + 63) & ~uintptr_t{63});
  };
  const uint16_t* w = align64(w_store.data());
  const uint16_t* x = align64(x_store.data());
  // k_block_stride 0 in L1: OneGroup reads the layout's strides only, never validates them.
  const Layout layout{kOutputs, weights_in_l1 ? 0 : step_elems, 1};
  alignas(64) float sums[kTileRows * kOutputs];
  const int64_t sums_stride = kOutputs * sizeof(float);
  ConfigureTiles();
  // Once to warm the caches, then timed.
  OneGroup<4>(x, x_stride, w, layout, kSteps, nullptr, 0, sums, sums_stride, nullptr, 0,
              false, PendingRows{});
  const auto start = std::chrono::steady_clock::now();
  for (int64_t r = 0; r < repeats; ++r) {
    OneGroup<4>(x, x_stride, w, layout, kSteps, nullptr, 0, sums, sums_stride, nullptr, 0,
                false, PendingRows{});
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ReleaseTiles();
  const double flops = 2.0 * kTileRows * kOutputs * kBlockCols * kSteps * repeats;
  return sums[0] < 0 ? 0 : flops / seconds;
}

}  // namespace bf16_amx
}  // namespace tpserve
