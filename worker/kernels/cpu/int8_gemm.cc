#include "worker/kernels/cpu/int8_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "worker/dtype.h"
#include "worker/kernels/cpu/cpu_threads.h"
#include "worker/kernels/cpu/int8_avx512.h"
#include "worker/tensor.h"

// GCC 12's AVX-512 intrinsics pass _mm512_undefined_*() (a self-initialised variable) as
// the unused merge source of their masked builtins, which -W(maybe-)uninitialized
// reports at every inlined use; nothing in this file reads an uninitialised value.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// Two layouts, chosen when the weight is quantized (Impl::vnni):
//
// - With AVX512-VNNI in use, int8_avx512.h's blocks of 48 outputs, pair-interleaved: the
//   kernel there sums each output in its own int32 lane (vpdpwssd on x's broadcast
//   column pair), 1-8 rows of x a pass over a block.
// - Otherwise q holds [n_pad, k_pad] int8, rows padded to a multiple of kRowsPerBlock,
//   stored as [n_pad/4, k_pad/32, 4, 32]: a block of 4 rows is one contiguous run in the
//   order the AVX2 kernel consumes it (each 32-column step of the 4 rows in turn), one
//   sequential stream for the hardware prefetcher rather than 4 short ones.
//
// Both pad columns to a multiple of kColsPerStep and rows to whole blocks with zeros
// (whose scale is 0), so the kernels have no tails. x is quantized per row to int16 with
// a power-of-two scale (QuantizeRowToInt16) into [m, k_pad], zero-padded.
//
// The AVX2 kernel takes a 32-column step's int16 x against a weight row's 32 columns,
// sign-extended, with vpmaddwd: 16 int32 lanes (two ymm), lane j holding columns 2j and
// 2j + 1 of every step. At each kChunkCols boundary the lanes are summed in int32 (exact:
// a chunk's products sum below 2³¹) and the chunk's sum goes to fp32, added to the
// earlier chunks' in column order from 0: the VNNI kernel's value, whose lanes hold an
// output each and sum every column of the chunk. So a row of y does not depend on the
// kernel, the path (decode or tiled), or the other rows of the call.
//
// AVX2: up to 6 rows of x the weight is streamed once, block after block (decode). Past
// that the work is tiled for the caches: a panel of kPanelBlocks blocks (L2) against
// passes of 6 rows of one column chunk of x (L1), the panel's sums kept in an fp32 tile.

namespace tpserve {
namespace {

constexpr int64_t kRowsPerBlock = 4;
constexpr int64_t kColsPerStep = 32;
constexpr int kRowsPerPass = 6;
constexpr int64_t kChunkCols = int8_avx512::kChunkCols;  // summed exactly in int32
constexpr int64_t kPanelBlocks = 16;  // 64 output rows: 128 KiB of int8 at k = 2048
constexpr size_t kAlignment = 64;
constexpr int64_t kPrefetchBytes = 2048;
constexpr float kInt16Max = 32767.0f;

static_assert(kChunkCols % kColsPerStep == 0, "chunks are whole steps");
static_assert(kChunkCols * 32767 * 127 < (int64_t{1} << 31),
              "a chunk's sum must not overflow int32");

std::atomic<Int8GemmIsa> max_isa{Int8GemmIsa::kAvx512Vnni};

int64_t RoundUp(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

// Where weight (row, col) lives in the AVX2 kernel's layout.
int64_t Avx2Offset(int64_t row, int64_t col, int64_t k_pad) {
  return (row / kRowsPerBlock) * kRowsPerBlock * k_pad +
         (col / kColsPerStep) * kRowsPerBlock * kColsPerStep +
         (row % kRowsPerBlock) * kColsPerStep + col % kColsPerStep;
}

#define TPSERVE_TARGET_AVX512VNNI __attribute__((target("avx512f,avx512bw,avx512vnni")))

// The AVX2 kernel. A 32-column step's 16 int32 lanes are two ymm accumulators, columns
// 0-15 (lanes 0-7) and 16-31 (lanes 8-15); vpmaddwd sums int16 pairs, and vpaddd
// accumulates. 16 ymm registers hold 3 rows of x by 2 weight rows (12 accumulators), or 1
// row of x by all 4 weight rows (8).

// The chunk's sum: the lanes (lo, hi) added in int32, exact (the chunk's products sum
// below 2³¹, so no partial sum overflows either), then converted to fp32.
inline float LaneSumAvx2(__m256i lo, __m256i hi) {
  const __m256i t = _mm256_add_epi32(lo, hi);
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return static_cast<float>(_mm_cvtsi128_si32(s));
}

inline __m256i WidenInt8(const int8_t* p) {
  return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// acc += vpmaddwd(w, *x) with x read from memory: GCC 12 left to itself keeps the
// accumulators of DotChunkAvx2 on the stack (a load and a store per update); one asm per
// update leaves it a register each and one scratch.
inline __attribute__((always_inline)) void MaddAccumulate(__m256i& acc, __m256i w,
                                                          const int16_t* x) {
  __m256i product;
  asm("vpmaddwd %[x], %[w], %[p]\n\tvpaddd %[p], %[acc], %[acc]"
      : [acc] "+x"(acc), [p] "=&x"(product)
      : [w] "x"(w), [x] "m"(*reinterpret_cast<const __m256i*>(x)));
}

// out[i][r0 + rr] = Σ_{c in [begin, end)} x[i][c] · w_{r0+rr}[c] for MB rows of x and
// NR weight rows from r0 of the block at q, the chunk's sum exact (end - begin ≤
// kChunkCols). Accumulators are named variables (lo/hi, x row, weight row): GCC keeps an
// array of vectors on the stack, storing it every step, however its loops are unrolled.
#define TPSERVE_AVX2_ACC(i, rr) __m256i lo##i##rr = zero, hi##i##rr = zero
#define TPSERVE_AVX2_STEP(i, rr)                                   \
  if constexpr (MB > i && NR > rr) {                               \
    MaddAccumulate(lo##i##rr, wl##rr, x + i * x_stride + c);       \
    MaddAccumulate(hi##i##rr, wh##rr, x + i * x_stride + c + 16);  \
  }
#define TPSERVE_AVX2_OUT(i, rr) \
  if constexpr (MB > i && NR > rr) out[i][r0 + rr] = LaneSumAvx2(lo##i##rr, hi##i##rr)

template <int MB, int NR>
void DotChunkAvx2(const int8_t* q, int r0, const int16_t* x, int64_t x_stride, int64_t begin,
                  int64_t end, float out[][kRowsPerBlock]) {
  static_assert((MB >= 1 && MB <= 3 && NR == 2) || (MB == 1 && NR == kRowsPerBlock));
  const __m256i zero = _mm256_setzero_si256();
  TPSERVE_AVX2_ACC(0, 0);
  TPSERVE_AVX2_ACC(0, 1);
  TPSERVE_AVX2_ACC(0, 2);
  TPSERVE_AVX2_ACC(0, 3);
  TPSERVE_AVX2_ACC(1, 0);
  TPSERVE_AVX2_ACC(1, 1);
  TPSERVE_AVX2_ACC(2, 0);
  TPSERVE_AVX2_ACC(2, 1);
  for (int64_t c = begin; c < end; c += kColsPerStep) {
    const int8_t* wq = q + c * kRowsPerBlock + r0 * kColsPerStep;
    _mm_prefetch(reinterpret_cast<const char*>(wq + kPrefetchBytes), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(wq + kPrefetchBytes + 64), _MM_HINT_T0);
    const __m256i wl0 = WidenInt8(wq), wh0 = WidenInt8(wq + 16);
    const __m256i wl1 = WidenInt8(wq + kColsPerStep), wh1 = WidenInt8(wq + kColsPerStep + 16);
    TPSERVE_AVX2_STEP(0, 0)
    TPSERVE_AVX2_STEP(0, 1)
    TPSERVE_AVX2_STEP(1, 0)
    TPSERVE_AVX2_STEP(1, 1)
    TPSERVE_AVX2_STEP(2, 0)
    TPSERVE_AVX2_STEP(2, 1)
    if constexpr (NR == kRowsPerBlock) {
      const __m256i wl2 = WidenInt8(wq + 2 * kColsPerStep);
      const __m256i wh2 = WidenInt8(wq + 2 * kColsPerStep + 16);
      const __m256i wl3 = WidenInt8(wq + 3 * kColsPerStep);
      const __m256i wh3 = WidenInt8(wq + 3 * kColsPerStep + 16);
      TPSERVE_AVX2_STEP(0, 2)
      TPSERVE_AVX2_STEP(0, 3)
    }
  }
  TPSERVE_AVX2_OUT(0, 0);
  TPSERVE_AVX2_OUT(0, 1);
  TPSERVE_AVX2_OUT(0, 2);
  TPSERVE_AVX2_OUT(0, 3);
  TPSERVE_AVX2_OUT(1, 0);
  TPSERVE_AVX2_OUT(1, 1);
  TPSERVE_AVX2_OUT(2, 0);
  TPSERVE_AVX2_OUT(2, 1);
}

#undef TPSERVE_AVX2_ACC
#undef TPSERVE_AVX2_STEP
#undef TPSERVE_AVX2_OUT

// Rows of x against one 4-row block over [begin, end): one row of x takes the 4 weight
// rows at once; more rows go 3 at a time, each against the block's two halves (the second
// from L1).
void BlockDotChunkAvx2(int rows, const int8_t* q, const int16_t* x, int64_t x_stride,
                       int64_t begin, int64_t end, float out[][kRowsPerBlock]) {
  if (rows == 1) return DotChunkAvx2<1, kRowsPerBlock>(q, 0, x, x_stride, begin, end, out);
  for (int i = 0; i < rows; i += 3) {
    const int n = std::min(3, rows - i);
    for (int r0 = 0; r0 < kRowsPerBlock; r0 += 2) {
      const int16_t* xi = x + i * x_stride;
      if (n == 3) DotChunkAvx2<3, 2>(q, r0, xi, x_stride, begin, end, out + i);
      if (n == 2) DotChunkAvx2<2, 2>(q, r0, xi, x_stride, begin, end, out + i);
      if (n == 1) DotChunkAvx2<1, 2>(q, r0, xi, x_stride, begin, end, out + i);
    }
  }
}

}  // namespace

namespace {

// max|x| over [k], and whether every value is finite.
float RowAbsMax(const float* x, int64_t k, bool* finite) {
  float amax = 0.0f;
  bool all_finite = true;
  for (int64_t c = 0; c < k; ++c) {
    all_finite &= std::isfinite(x[c]);
    amax = std::max(amax, std::fabs(x[c]));
  }
  *finite = all_finite;
  return amax;
}

TPSERVE_TARGET_AVX512VNNI float RowAbsMaxAvx512(const float* x, int64_t k, bool* finite) {
  const __m512i abs_bits = _mm512_set1_epi32(0x7fffffff);
  const __m512i inf_bits = _mm512_set1_epi32(0x7f800000);
  __m512i amax = _mm512_setzero_si512();  // |x| as bits: for finite floats, ordered as ints
  __mmask16 non_finite = 0;
  for (int64_t c = 0; c < k; c += 16) {
    const __mmask16 m = k - c >= 16 ? __mmask16{0xFFFF} : __mmask16((1u << (k - c)) - 1);
    const __m512i v = _mm512_and_si512(_mm512_maskz_loadu_epi32(m, x + c), abs_bits);
    non_finite |= _mm512_mask_cmpge_epi32_mask(m, v, inf_bits);
    amax = _mm512_max_epi32(amax, v);
  }
  *finite = non_finite == 0;
  const int32_t bits = _mm512_reduce_max_epi32(amax);
  float out;
  std::memcpy(&out, &bits, sizeof(out));
  return out;
}

// q = round-to-nearest-even(x · inv), inv a power of two, |x · inv| ≤ 32767.
TPSERVE_TARGET_AVX512VNNI void ScaleToInt16Avx512(const float* x, int64_t k, float inv,
                                                  int16_t* q) {
  const __m512 scale = _mm512_set1_ps(inv);
  for (int64_t c = 0; c < k; c += 16) {
    const __mmask16 m = k - c >= 16 ? __mmask16{0xFFFF} : __mmask16((1u << (k - c)) - 1);
    const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + c), scale);
    // To int32 rounding to nearest even, then narrowed with saturation, stored masked.
    _mm512_mask_cvtsepi32_storeu_epi16(q + c, m, _mm512_cvtps_epi32(v));
  }
}

// q = clamp(round-to-nearest-even(w · inv), ±127) for a weight row, as the scalar
// loop in Impl::Quantize computes it.
TPSERVE_TARGET_AVX512VNNI void ScaleToInt8Avx512(const float* w, int64_t k, float inv,
                                                 int8_t* q) {
  const __m512 scale = _mm512_set1_ps(inv);
  const __m512i top = _mm512_set1_epi32(127), bottom = _mm512_set1_epi32(-127);
  for (int64_t c = 0; c < k; c += 16) {
    const __mmask16 m = k - c >= 16 ? __mmask16{0xFFFF} : __mmask16((1u << (k - c)) - 1);
    const __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, w + c), scale));
    _mm512_mask_cvtsepi32_storeu_epi8(q + c, m, _mm512_max_epi32(_mm512_min_epi32(v, top), bottom));
  }
}

// Impl::Store for a 48-output block of the VNNI kernel's sums ([rows][48]) whose first
// `width` outputs exist, with the same products in the same order: y[i][o] =
// (x_scales[i] · sums[i][o]) · scales[o] (+ y's old value), y's rows y_stride apart.
TPSERVE_TARGET_AVX512VNNI void StoreBlockAvx512(const float* sums, const float* x_scales,
                                                int rows, const float* scales, int64_t width,
                                                float* y, int64_t y_stride, bool accumulate) {
  constexpr int64_t b = int8_avx512::kBlockOutputs;
  for (int i = 0; i < rows; ++i) {
    const __m512 xs = _mm512_set1_ps(x_scales[i]);
    float* out = y + i * y_stride;
    for (int64_t o = 0; o < width; o += 16) {
      const __mmask16 m =
          width - o >= 16 ? __mmask16{0xFFFF} : __mmask16((1u << (width - o)) - 1);
      __m512 v = _mm512_mul_ps(_mm512_mul_ps(xs, _mm512_loadu_ps(sums + i * b + o)),
                               _mm512_loadu_ps(scales + o));
      if (accumulate) v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, out + o), v);
      _mm512_mask_storeu_ps(out + o, m, v);
    }
  }
}

}  // namespace

float QuantizeRowToInt16(const float* x, int64_t k, int16_t* q) {
  const bool vector = Int8GemmIsaInUse() == Int8GemmIsa::kAvx512Vnni;
  bool finite = true;
  const float amax = vector ? RowAbsMaxAvx512(x, k, &finite) : RowAbsMax(x, k, &finite);
  if (!finite || amax == 0.0f) {
    std::fill(q, q + k, int16_t{0});
    return finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
  }
  // The smallest power of two 2^e with amax / 2^e ≤ 32767: amax = f·2^p, f in [0.5, 1).
  int p = 0;
  std::frexp(amax, &p);
  int e = p - 15;  // amax / 2^e = f·2^15 < 32768
  if (std::ldexp(amax, -e) > kInt16Max) ++e;
  if (-e >= -126 && -e <= 127) {  // 2^-e is a normal float: x · 2^-e is exact
    const float inv = std::ldexp(1.0f, -e);
    if (vector) {
      ScaleToInt16Avx512(x, k, inv, q);
    } else {
      for (int64_t c = 0; c < k; ++c) q[c] = static_cast<int16_t>(std::nearbyint(x[c] * inv));
    }
  } else {
    for (int64_t c = 0; c < k; ++c) {
      const float v = std::nearbyint(std::ldexp(x[c], -e));
      q[c] = static_cast<int16_t>(std::clamp(v, -kInt16Max, kInt16Max));
    }
  }
  return std::ldexp(1.0f, e);
}

struct Int8Weight::Impl {
  std::unique_ptr<void, decltype(&std::free)> storage{nullptr, &std::free};
  int8_t* q = nullptr;  // blocked [n_pad, k_pad], kAlignment-aligned inside storage
  std::vector<float> scales;  // [n_pad]; 0 for padding rows
  int64_t n_out = 0, k = 0, n_pad = 0, k_pad = 0;
  bool vnni = false;  // int8_avx512.h's layout, else the AVX2 kernel's

  // Lays out for the kernel in use (Int8GemmIsaInUse).
  void Allocate(int64_t rows, int64_t cols);
  int64_t Offset(int64_t row, int64_t col) const {
    return vnni ? int8_avx512::Offset(row, col, k_pad) : Avx2Offset(row, col, k_pad);
  }
  // x: [m, k] -> the returned xq [m, k_pad] int16 (zero-padded) and x's scales [m]
  // (NaN for a row with a non-finite value). xq lies in the calling thread's buffer,
  // valid until its next call.
  const int16_t* QuantizeX(const float* x, int64_t m, std::vector<float>& x_scales) const;
  // y[i][row0 + r] = x_scales[i] · scale · dots[i·dots_stride + r] (+ y if accumulate)
  // for i < rows, r < count, the rows of the weight that exist.
  void Store(const float* dots, int64_t dots_stride, const float* x_scales, int64_t rows,
             int64_t row0, int64_t count, float* y, bool accumulate) const;
  // y = x · wᵀ (+ y if accumulate) with the kernel of the layout.
  void MatMulVnni(const float* x, int64_t m, float* y, bool accumulate) const;
  void MatMulAvx2(const float* x, int64_t m, float* y, bool accumulate) const;
  // Quantizes rows [row_begin, row_end) from the values `fill(row, values)` writes ([k]
  // floats), once allocated. Returns -1, or the first row holding a NaN or ±Inf (where it
  // stops, that row's grid unwritten).
  template <typename Fill>
  int64_t Quantize(int64_t row_begin, int64_t row_end, Fill fill);
};

template <typename Fill>
int64_t Int8Weight::Impl::Quantize(int64_t row_begin, int64_t row_end, Fill fill) {
  // One row at a time: its values, then its grid (vectorized for the VNNI kernel, scalar
  // for the AVX2 one: the same values), then copied into the layout a column pair (VNNI)
  // or a 32-column step (AVX2) at a time.
  const bool vector = vnni;
  std::vector<float> row(static_cast<size_t>(k));
  std::vector<int8_t> grid(static_cast<size_t>(k_pad), 0);  // the padding stays 0
  for (int64_t r = row_begin; r < row_end; ++r) {
    fill(r, row.data());
    bool finite = true;
    const float amax = vector ? RowAbsMaxAvx512(row.data(), k, &finite)
                              : RowAbsMax(row.data(), k, &finite);
    if (!finite) return r;
    scales[r] = amax / 127.0f;
    // 127 / amax overflows where amax < 127 / FLT_MAX (about 3.7e-37: subnormal rows and
    // the smallest normal ones), and 0 · inf would be NaN: such a row divides by amax.
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    if (vector && !std::isinf(inv)) {
      ScaleToInt8Avx512(row.data(), k, inv, grid.data());
    } else {
      for (int64_t c = 0; c < k; ++c) {
        const float v =
            std::nearbyint(std::isinf(inv) ? row[c] / amax * 127.0f : row[c] * inv);
        grid[c] = static_cast<int8_t>(std::clamp(v, -127.0f, 127.0f));
      }
    }
    // Runs of columns lie a fixed stride apart in both layouts (k_pad is a multiple of
    // kColsPerStep): a column pair a 96-byte line (VNNI), a step a block's 4 rows (AVX2).
    // Copies of a constant size, which the compiler turns into single moves.
    int8_t* dst = q + Offset(r, 0);
    if (vnni) {
      for (int64_t c = 0; c < k_pad; c += 2, dst += 2 * int8_avx512::kBlockOutputs) {
        std::memcpy(dst, &grid[c], 2);
      }
    } else {
      for (int64_t c = 0; c < k_pad; c += kColsPerStep, dst += kRowsPerBlock * kColsPerStep) {
        std::memcpy(dst, &grid[c], kColsPerStep);
      }
    }
  }
  return -1;
}

void Int8Weight::Impl::Allocate(int64_t rows, int64_t cols) {
  n_out = rows;
  k = cols;
  vnni = Int8GemmIsaInUse() == Int8GemmIsa::kAvx512Vnni;
  n_pad = RoundUp(rows, vnni ? int8_avx512::kBlockOutputs : kRowsPerBlock);
  k_pad = RoundUp(cols, kColsPerStep);
  storage.reset(AllocateZeroed(static_cast<size_t>(n_pad * k_pad) + kAlignment));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(storage.get());
  q = reinterpret_cast<int8_t*>((begin + kAlignment - 1) & ~uintptr_t{kAlignment - 1});
  scales.assign(static_cast<size_t>(n_pad), 0.0f);
}

const int16_t* Int8Weight::Impl::QuantizeX(const float* x, int64_t m,
                                           std::vector<float>& x_scales) const {
  // Kept between calls, grown to the largest call's [m, k_pad] (a 2,048-token prefill at
  // k = 5,632: 23 MiB), as bf16_gemm.cc keeps x_bf16. The compute threads, which would
  // each see their own thread_local, are handed its data.
  thread_local std::vector<int16_t> xq;
  if (xq.size() < static_cast<size_t>(m * k_pad)) xq.resize(static_cast<size_t>(m * k_pad));
  x_scales.resize(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) {
    int16_t* row = &xq[i * k_pad];  // [k_pad]: QuantizeRowToInt16 writes [0, k)
    x_scales[i] = QuantizeRowToInt16(x + i * k, k, row);
    std::fill(row + k, row + k_pad, int16_t{0});
  }
  return xq.data();
}

void Int8Weight::Impl::Store(const float* dots, int64_t dots_stride, const float* x_scales,
                             int64_t rows, int64_t row0, int64_t count, float* y,
                             bool accumulate) const {
  const int64_t valid = std::min(count, n_out - row0);
  for (int64_t i = 0; i < rows; ++i) {
    float* out = y + i * n_out + row0;
    const float* dot = dots + i * dots_stride;
    for (int64_t r = 0; r < valid; ++r) {
      // x's scale is a power of two (or NaN): multiplying by it first is exact.
      const float v = (x_scales[i] * dot[r]) * scales[row0 + r];
      out[r] = accumulate ? out[r] + v : v;
    }
  }
}

void Int8Weight::Impl::MatMulVnni(const float* x, int64_t m, float* y, bool accumulate) const {
  std::vector<float> x_scales;
  const int16_t* const xq = QuantizeX(x, m, x_scales);  // [m, k_pad]
  // The compute threads take runs of output blocks as they become free; each output's
  // sums run in the same order whatever the split, so no bit moves.
  constexpr int64_t b = int8_avx512::kBlockOutputs;
  ParallelChunks(n_pad / b, /*min_chunk=*/2, CpuThreads(), [&](int64_t begin, int64_t end) {
    int8_avx512::MatMulBlocks(
        xq, m, k_pad, q, begin, end,
        [&](int64_t block, int64_t row0, int rows, const float* sums) {
          StoreBlockAvx512(sums, &x_scales[row0], rows, &scales[block * b],
                           std::min(b, n_out - block * b), y + row0 * n_out + block * b,
                           n_out, accumulate);
        });
  });
}

void Int8Weight::Impl::MatMulAvx2(const float* x, int64_t m, float* y, bool accumulate) const {
  constexpr auto kernel = BlockDotChunkAvx2;
  std::vector<float> x_scales;
  const int16_t* const xq = QuantizeX(x, m, x_scales);  // [m, k_pad]
  // The compute threads take runs of output blocks (decode) or panels (tiled) as they
  // become free (ParallelChunks); each output's sums run in the same order whatever the
  // split, so no bit moves.
  if (m <= kRowsPerPass) {
    // Decode: the weight streams from memory once, block after block.
    const int rows = static_cast<int>(m);
    const int64_t blocks = n_pad / kRowsPerBlock;
    ParallelChunks(blocks, /*min_chunk=*/8, CpuThreads(), [&](int64_t begin, int64_t end) {
      float dots[kRowsPerPass][kRowsPerBlock];
      for (int64_t b = begin * kRowsPerBlock; b < end * kRowsPerBlock; b += kRowsPerBlock) {
        float total[kRowsPerPass][kRowsPerBlock] = {};
        for (int64_t c = 0; c < k_pad; c += kChunkCols) {
          kernel(rows, q + b * k_pad, xq, k_pad, c, std::min(k_pad, c + kChunkCols), dots);
          for (int i = 0; i < rows; ++i) {
            for (int r = 0; r < kRowsPerBlock; ++r) total[i][r] += dots[i][r];
          }
        }
        Store(&total[0][0], kRowsPerBlock, x_scales.data(), m, b, kRowsPerBlock, y, accumulate);
      }
    });
    return;
  }
  // Tiled: a panel of weight blocks (L2) against passes of 6 rows of one chunk of x (L1).
  constexpr int64_t kPanelRows = kPanelBlocks * kRowsPerBlock;
  const int64_t panels = (n_pad + kPanelRows - 1) / kPanelRows;
  ParallelChunks(panels, /*min_chunk=*/1, CpuThreads(), [&](int64_t first, int64_t last) {
    float dots[kRowsPerPass][kRowsPerBlock];
    std::vector<float> tile(static_cast<size_t>(m * kPanelRows));  // [m, kPanelRows] sums
    for (int64_t p = first * kPanelRows; p < std::min(n_pad, last * kPanelRows); p += kPanelRows) {
      const int64_t panel_end = std::min(n_pad, p + kPanelRows);
      std::fill(tile.begin(), tile.end(), 0.0f);
      for (int64_t c = 0; c < k_pad; c += kChunkCols) {
        const int64_t c_end = std::min(k_pad, c + kChunkCols);
        for (int64_t i = 0; i < m; i += kRowsPerPass) {
          const int rows = static_cast<int>(std::min<int64_t>(kRowsPerPass, m - i));
          for (int64_t b = p; b < panel_end; b += kRowsPerBlock) {
            kernel(rows, q + b * k_pad, xq + i * k_pad, k_pad, c, c_end, dots);
            for (int ii = 0; ii < rows; ++ii) {
              float* sums = &tile[(i + ii) * kPanelRows + (b - p)];
              for (int r = 0; r < kRowsPerBlock; ++r) sums[r] += dots[ii][r];
            }
          }
        }
      }
      Store(tile.data(), kPanelRows, x_scales.data(), m, p, panel_end - p, y, accumulate);
    }
  });
}

namespace {

absl::Status CheckSizes(const void* data, int64_t n_out, int64_t k) {
  if (n_out > 0 && k > 0 && data != nullptr) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("int8 weight [%d, %d]: sizes must be positive, data set", n_out, k));
}

absl::Status NotFinite(int64_t i, int64_t k, float value) {
  return absl::InvalidArgumentError(absl::StrFormat(
      "weight [%d, %d] is not finite (%f); it cannot be quantized", i / k, i % k, value));
}

}  // namespace

Int8Weight::Int8Weight(int64_t n_out, int64_t k, std::unique_ptr<Impl> impl)
    : n_out_(n_out), k_(k), impl_(std::move(impl)) {}
Int8Weight::Int8Weight(Int8Weight&&) noexcept = default;
Int8Weight& Int8Weight::operator=(Int8Weight&&) noexcept = default;
Int8Weight::~Int8Weight() = default;

absl::StatusOr<Int8Weight> Int8Weight::QuantizeBf16(const uint16_t* data, int64_t n_out,
                                                    int64_t k) {
  if (absl::Status s = CheckSizes(data, n_out, k); !s.ok()) return s;
  auto impl = std::make_unique<Impl>();
  impl->Allocate(n_out, k);
  const int64_t bad = impl->Quantize(
      0, n_out, [&](int64_t r, float* row) { Bf16ToFloats(data + r * k, k, row); });
  if (bad >= 0) {  // the first non-finite value lies in the first row that holds one
    const int64_t i = bad * k + FirstNonFiniteBf16(data + bad * k, k);
    return NotFinite(i, k, Bf16ToFloat(data[i]));
  }
  return Int8Weight(n_out, k, std::move(impl));
}

absl::StatusOr<Int8Weight> Int8Weight::QuantizeBf16Rows(int64_t n_out, int64_t k,
                                                        Bf16RowSource source) {
  TPSERVE_ASSIGN_OR_RETURN(Builder builder, Builder::Create(n_out, k));
  TPSERVE_RETURN_IF_ERROR(builder.QuantizeRows(0, n_out, source));
  return builder.Finish();
}

Int8Weight::Builder::Builder(int64_t n_out, int64_t k, std::unique_ptr<Impl> impl)
    : n_out_(n_out), k_(k), impl_(std::move(impl)), done_(static_cast<size_t>(n_out), false) {}
Int8Weight::Builder::Builder(Builder&&) noexcept = default;
Int8Weight::Builder& Int8Weight::Builder::operator=(Builder&&) noexcept = default;
Int8Weight::Builder::~Builder() = default;

absl::StatusOr<Int8Weight::Builder> Int8Weight::Builder::Create(int64_t n_out, int64_t k) {
  if (n_out <= 0 || k <= 0) return CheckSizes(nullptr, n_out, k);
  auto impl = std::make_unique<Impl>();
  impl->Allocate(n_out, k);
  return Builder(n_out, k, std::move(impl));
}

absl::Status Int8Weight::Builder::QuantizeRows(int64_t row0, int64_t rows,
                                               Bf16RowSource source) {
  if (impl_ == nullptr) return absl::FailedPreconditionError("int8 weight: finished already");
  if (row0 < 0 || rows < 0 || row0 + rows > n_out_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "int8 weight [%d, %d]: rows [%d, %d) are outside it", n_out_, k_, row0, row0 + rows));
  }
  for (int64_t r = row0; r < row0 + rows; ++r) {
    if (done_[r]) {
      return absl::InvalidArgumentError(
          absl::StrFormat("int8 weight [%d, %d]: row %d is quantized already", n_out_, k_, r));
    }
  }
  const int64_t k = k_;
  const int64_t chunk_rows =
      std::clamp<int64_t>(kSourceChunkBytes / (2 * k), 1, std::max<int64_t>(rows, 1));
  std::vector<uint16_t> chunk(static_cast<size_t>(std::min(chunk_rows, rows) * k));
  for (int64_t r0 = row0; r0 < row0 + rows; r0 += chunk_rows) {
    const int64_t n = std::min(chunk_rows, row0 + rows - r0);
    TPSERVE_RETURN_IF_ERROR(source(r0, n, chunk.data()));
    const int64_t bad = impl_->Quantize(r0, r0 + n, [&](int64_t r, float* row) {
      Bf16ToFloats(chunk.data() + (r - r0) * k, k, row);
    });
    if (bad >= 0) {  // its rows are not counted done: the builder is not finishable
      const uint16_t* row = chunk.data() + (bad - r0) * k;
      const int64_t c = FirstNonFiniteBf16(row, k);
      return NotFinite(bad * k + c, k, Bf16ToFloat(row[c]));
    }
    for (int64_t r = r0; r < r0 + n; ++r) done_[r] = true;
  }
  return absl::OkStatus();
}

absl::StatusOr<Int8Weight> Int8Weight::Builder::Finish() {
  if (impl_ == nullptr) return absl::FailedPreconditionError("int8 weight: finished already");
  const auto missing = std::find(done_.begin(), done_.end(), false) - done_.begin();
  if (missing < n_out_) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "int8 weight [%d, %d]: row %d was never quantized (%d of %d rows were)", n_out_, k_,
        missing, std::count(done_.begin(), done_.end(), true), n_out_));
  }
  return Int8Weight(n_out_, k_, std::move(impl_));
}

absl::StatusOr<Int8Weight> Int8Weight::QuantizeFloat(const float* data, int64_t n_out,
                                                     int64_t k) {
  if (absl::Status s = CheckSizes(data, n_out, k); !s.ok()) return s;
  auto impl = std::make_unique<Impl>();
  impl->Allocate(n_out, k);
  const int64_t bad = impl->Quantize(
      0, n_out, [&](int64_t r, float* row) { std::copy(data + r * k, data + (r + 1) * k, row); });
  if (bad >= 0) {  // the first non-finite value lies in the first row that holds one
    const float* row = data + bad * k;
    const int64_t c = std::find_if(row, row + k, [](float v) { return !std::isfinite(v); }) - row;
    return NotFinite(bad * k + c, k, row[c]);
  }
  return Int8Weight(n_out, k, std::move(impl));
}

absl::Status Int8Weight::MatMul(const float* x, int64_t m, float* y, bool accumulate) const {
  return MatMulInt8(x, m, *this, y, accumulate);
}

size_t Int8Weight::bytes() const {
  return static_cast<size_t>(impl_->n_pad * impl_->k_pad) + impl_->scales.size() * sizeof(float);
}

int8_t Int8Weight::q(int64_t row, int64_t col) const {
  return impl_->q[impl_->Offset(row, col)];
}
float Int8Weight::scale(int64_t row) const { return impl_->scales[row]; }

absl::Status MatMulInt8(const float* x, int64_t m, const Int8Weight& w, float* y,
                        bool accumulate) {
  if (m < 0 || (m > 0 && (x == nullptr || y == nullptr))) {
    return absl::InvalidArgumentError(absl::StrCat("MatMulInt8: bad input, m = ", m));
  }
  if (w.impl_ == nullptr) return absl::FailedPreconditionError("MatMulInt8: moved-from weight");
  if (m == 0) return absl::OkStatus();
  if (w.impl_->vnni) {
    w.impl_->MatMulVnni(x, m, y, accumulate);
  } else {
    w.impl_->MatMulAvx2(x, m, y, accumulate);
  }
  return absl::OkStatus();
}

Int8GemmIsa LimitInt8GemmIsa(Int8GemmIsa isa) {
  max_isa.store(isa, std::memory_order_relaxed);
  return Int8GemmIsaInUse();
}

Int8GemmIsa Int8GemmIsaInUse() {
  return max_isa.load(std::memory_order_relaxed) == Int8GemmIsa::kAvx512Vnni &&
                 int8_avx512::Available()
             ? Int8GemmIsa::kAvx512Vnni
             : Int8GemmIsa::kAvx2;
}

}  // namespace tpserve
