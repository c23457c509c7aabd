#include "worker/kernels/cpu/int8_gemm.h"

#include <cblas.h>
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/dtype.h"
#include "worker/tensor.h"

// Layout: q is [n_pad, k_pad] int8, rows padded to a multiple of kRowsPerBlock and columns
// to a multiple of kColsPerStep with zeros (whose scale is 0), so the kernels have no
// tails. x is rounded to bf16 into [m, k_pad] with zero padding.
//
// The AVX512-BF16 kernel takes kRowsPerBlock output rows at a time. For up to
// kRowsPerPass rows of x it widens each 32-column step of those rows in registers
// (vpmovsxbd, vcvtdq2ps, vcvtne2ps2bf16) and runs vdpbf16ps against each x row:
// 4 weight vectors + 1 x vector + 4·6 accumulators fit the 32 zmm registers. For more
// rows of x the block's rows are widened once into a bf16 buffer ([4, k_pad]: 45 KiB at
// k = 5632, L1/L2-resident) that each pass of 6 x rows reads, so the widening, the costly
// part, is paid once per weight element whatever m.

namespace tpserve {
namespace {

constexpr int64_t kRowsPerBlock = 4;
constexpr int64_t kColsPerStep = 32;
constexpr int kRowsPerPass = 6;
constexpr size_t kAlignment = 64;
// The generic path widens this many weights at a time (an L2-sized fp32 panel).
constexpr int64_t kGenericPanelFloats = int64_t{1} << 16;

std::atomic<Int8GemmIsa> max_isa{Int8GemmIsa::kAvx512Bf16};

bool CpuHasAvx512Bf16() {
  static const bool has = __builtin_cpu_supports("avx512f") &&
                          __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512bf16");
  return has;
}

int64_t RoundUp(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

#define TPSERVE_TARGET_AVX512BF16 \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16")))

// 32 int8 weights -> 32 bf16 (exact: every int8 is a bf16), in column order.
TPSERVE_TARGET_AVX512BF16 inline __m512bh WidenToBf16(const int8_t* p) {
  const __m512 lo = _mm512_cvtepi32_ps(
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  const __m512 hi = _mm512_cvtepi32_ps(
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16))));
  return _mm512_cvtne2ps_pbh(hi, lo);
}

TPSERVE_TARGET_AVX512BF16 inline __m512bh LoadBf16(const uint16_t* p) {
  return (__m512bh)_mm512_loadu_si512(p);
}

// out[i][r] = Σ_c x[i][c] · w_r[c] for MB rows of x (stride k_pad) and the block's 4
// weight rows: int8 rows at q (stride k_pad) when kFromInt8, else bf16 rows at wb.
template <int MB, bool kFromInt8>
TPSERVE_TARGET_AVX512BF16 void BlockDot(const int8_t* q, const uint16_t* wb, const uint16_t* x,
                                        int64_t k_pad, float out[][kRowsPerBlock]) {
  // Fully unrolled, so that the accumulators live in registers (-O2 does not peel these).
  __m512 acc[MB][kRowsPerBlock];
#pragma GCC unroll 8
  for (int i = 0; i < MB; ++i) {
#pragma GCC unroll 4
    for (int r = 0; r < kRowsPerBlock; ++r) acc[i][r] = _mm512_setzero_ps();
  }
  for (int64_t c = 0; c < k_pad; c += kColsPerStep) {
    __m512bh w[kRowsPerBlock];
#pragma GCC unroll 4
    for (int r = 0; r < kRowsPerBlock; ++r) {
      w[r] = kFromInt8 ? WidenToBf16(q + r * k_pad + c) : LoadBf16(wb + r * k_pad + c);
    }
#pragma GCC unroll 8
    for (int i = 0; i < MB; ++i) {
      const __m512bh xv = LoadBf16(x + i * k_pad + c);
#pragma GCC unroll 4
      for (int r = 0; r < kRowsPerBlock; ++r) acc[i][r] = _mm512_dpbf16_ps(acc[i][r], xv, w[r]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MB; ++i) {
#pragma GCC unroll 4
    for (int r = 0; r < kRowsPerBlock; ++r) out[i][r] = _mm512_reduce_add_ps(acc[i][r]);
  }
}

template <bool kFromInt8>
TPSERVE_TARGET_AVX512BF16 void BlockDotRows(int rows, const int8_t* q, const uint16_t* wb,
                                            const uint16_t* x, int64_t k_pad,
                                            float out[][kRowsPerBlock]) {
  switch (rows) {
    case 1: return BlockDot<1, kFromInt8>(q, wb, x, k_pad, out);
    case 2: return BlockDot<2, kFromInt8>(q, wb, x, k_pad, out);
    case 3: return BlockDot<3, kFromInt8>(q, wb, x, k_pad, out);
    case 4: return BlockDot<4, kFromInt8>(q, wb, x, k_pad, out);
    case 5: return BlockDot<5, kFromInt8>(q, wb, x, k_pad, out);
    default: return BlockDot<kRowsPerPass, kFromInt8>(q, wb, x, k_pad, out);
  }
}

TPSERVE_TARGET_AVX512BF16 void WidenRowsToBf16(const int8_t* q, int64_t count, uint16_t* dst) {
  for (int64_t c = 0; c < count; c += kColsPerStep) {
    _mm512_storeu_si512(dst + c, (__m512i)WidenToBf16(q + c));
  }
}

}  // namespace

struct Int8Weight::Impl {
  std::unique_ptr<void, decltype(&std::free)> storage{nullptr, &std::free};
  int8_t* q = nullptr;  // [n_pad, k_pad], kAlignment-aligned inside storage
  std::vector<float> scales;  // [n_pad]; 0 for padding rows
  int64_t n_out = 0, k = 0, n_pad = 0, k_pad = 0;

  void Allocate(int64_t rows, int64_t cols);
  // x: [m, k] -> [m, k_pad] bf16 bits, zero-padded.
  std::vector<uint16_t> RoundX(const float* x, int64_t m) const;
  // y[i][row] = scale · dot (+ y if accumulate), for the rows that exist.
  void Store(const float dots[][kRowsPerBlock], int rows, int64_t block_row, float* y,
             bool accumulate) const;
  void MatMulAvx512(const float* x, int64_t m, float* y, bool accumulate) const;
  void MatMulGeneric(const float* x, int64_t m, float* y, bool accumulate) const;
  // Quantizes rows of `get(row, col)` (already checked finite), once allocated.
  template <typename Get>
  void Quantize(Get get);
};

template <typename Get>
void Int8Weight::Impl::Quantize(Get get) {
  for (int64_t r = 0; r < n_out; ++r) {
    float amax = 0.0f;
    for (int64_t c = 0; c < k; ++c) amax = std::max(amax, std::fabs(get(r, c)));
    scales[r] = amax / 127.0f;
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    int8_t* row = q + r * k_pad;
    for (int64_t c = 0; c < k; ++c) {
      const float v = std::nearbyint(get(r, c) * inv);
      row[c] = static_cast<int8_t>(std::clamp(v, -127.0f, 127.0f));
    }
  }
}

void Int8Weight::Impl::Allocate(int64_t rows, int64_t cols) {
  n_out = rows;
  k = cols;
  n_pad = RoundUp(rows, kRowsPerBlock);
  k_pad = RoundUp(cols, kColsPerStep);
  storage.reset(AllocateZeroed(static_cast<size_t>(n_pad * k_pad) + kAlignment));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(storage.get());
  q = reinterpret_cast<int8_t*>((begin + kAlignment - 1) & ~uintptr_t{kAlignment - 1});
  scales.assign(static_cast<size_t>(n_pad), 0.0f);
}

std::vector<uint16_t> Int8Weight::Impl::RoundX(const float* x, int64_t m) const {
  std::vector<uint16_t> xb(static_cast<size_t>(m * k_pad), 0);  // [m, k_pad]
  for (int64_t i = 0; i < m; ++i) FloatsToBf16(x + i * k, static_cast<size_t>(k), &xb[i * k_pad]);
  return xb;
}

void Int8Weight::Impl::Store(const float dots[][kRowsPerBlock], int rows, int64_t block_row,
                             float* y, bool accumulate) const {
  const int64_t valid = std::min(kRowsPerBlock, n_out - block_row);
  for (int i = 0; i < rows; ++i) {
    float* out = y + i * n_out + block_row;
    for (int64_t r = 0; r < valid; ++r) {
      const float v = scales[block_row + r] * dots[i][r];
      out[r] = accumulate ? out[r] + v : v;
    }
  }
}

void Int8Weight::Impl::MatMulAvx512(const float* x, int64_t m, float* y, bool accumulate) const {
  const std::vector<uint16_t> xb = RoundX(x, m);  // [m, k_pad]
  float dots[kRowsPerPass][kRowsPerBlock];
  if (m <= kRowsPerPass) {
    for (int64_t b = 0; b < n_pad; b += kRowsPerBlock) {
      BlockDotRows<true>(static_cast<int>(m), q + b * k_pad, nullptr, xb.data(), k_pad, dots);
      Store(dots, static_cast<int>(m), b, y, accumulate);
    }
    return;
  }
  std::unique_ptr<uint16_t[]> wb(new uint16_t[kRowsPerBlock * k_pad]);  // [4, k_pad] bf16
  for (int64_t b = 0; b < n_pad; b += kRowsPerBlock) {
    WidenRowsToBf16(q + b * k_pad, kRowsPerBlock * k_pad, wb.get());
    for (int64_t i = 0; i < m; i += kRowsPerPass) {
      const int rows = static_cast<int>(std::min<int64_t>(kRowsPerPass, m - i));
      BlockDotRows<false>(rows, nullptr, wb.get(), &xb[i * k_pad], k_pad, dots);
      Store(dots, rows, b, y + i * n_out, accumulate);
    }
  }
}

void Int8Weight::Impl::MatMulGeneric(const float* x, int64_t m, float* y, bool accumulate) const {
  const std::vector<uint16_t> xb = RoundX(x, m);
  std::vector<float> xr(xb.size());  // [m, k_pad]: x's bf16 values
  for (size_t i = 0; i < xb.size(); ++i) xr[i] = Bf16ToFloat(xb[i]);
  const int64_t panel_rows = std::clamp<int64_t>(kGenericPanelFloats / k_pad, 1, n_out);
  std::vector<float> panel(static_cast<size_t>(panel_rows * k_pad));  // [panel_rows, k_pad]
  const float beta = accumulate ? 1.0f : 0.0f;
  const auto kk = static_cast<blasint>(k_pad);
  for (int64_t j = 0; j < n_out; j += panel_rows) {
    const int64_t rows = std::min(panel_rows, n_out - j);
    for (int64_t r = 0; r < rows; ++r) {
      const int8_t* src = q + (j + r) * k_pad;
      const float s = scales[j + r];
      for (int64_t c = 0; c < k_pad; ++c) panel[r * k_pad + c] = s * static_cast<float>(src[c]);
    }
    if (m == 1) {
      cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<blasint>(rows), kk, 1.0f, panel.data(),
                  kk, xr.data(), 1, beta, y + j, 1);
    } else {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(m),
                  static_cast<blasint>(rows), kk, 1.0f, xr.data(), kk, panel.data(), kk, beta,
                  y + j, static_cast<blasint>(n_out));
    }
  }
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
  for (int64_t i = 0; i < n_out * k; ++i) {
    if ((data[i] & 0x7f80) == 0x7f80) return NotFinite(i, k, Bf16ToFloat(data[i]));
  }
  auto impl = std::make_unique<Impl>();
  impl->Allocate(n_out, k);
  impl->Quantize([&](int64_t r, int64_t c) { return Bf16ToFloat(data[r * k + c]); });
  return Int8Weight(n_out, k, std::move(impl));
}

absl::StatusOr<Int8Weight> Int8Weight::QuantizeFloat(const float* data, int64_t n_out,
                                                     int64_t k) {
  if (absl::Status s = CheckSizes(data, n_out, k); !s.ok()) return s;
  for (int64_t i = 0; i < n_out * k; ++i) {
    if (!std::isfinite(data[i])) return NotFinite(i, k, data[i]);
  }
  auto impl = std::make_unique<Impl>();
  impl->Allocate(n_out, k);
  impl->Quantize([&](int64_t r, int64_t c) { return data[r * k + c]; });
  return Int8Weight(n_out, k, std::move(impl));
}

absl::Status Int8Weight::MatMul(const float* x, int64_t m, float* y, bool accumulate) const {
  return MatMulInt8(x, m, *this, y, accumulate);
}

size_t Int8Weight::bytes() const {
  return static_cast<size_t>(impl_->n_pad * impl_->k_pad) + impl_->scales.size() * sizeof(float);
}

int8_t Int8Weight::q(int64_t row, int64_t col) const { return impl_->q[row * impl_->k_pad + col]; }
float Int8Weight::scale(int64_t row) const { return impl_->scales[row]; }

absl::Status MatMulInt8(const float* x, int64_t m, const Int8Weight& w, float* y,
                        bool accumulate) {
  if (m < 0 || (m > 0 && (x == nullptr || y == nullptr))) {
    return absl::InvalidArgumentError(absl::StrCat("MatMulInt8: bad input, m = ", m));
  }
  if (w.impl_ == nullptr) return absl::FailedPreconditionError("MatMulInt8: moved-from weight");
  if (m == 0) return absl::OkStatus();
  if (Int8GemmIsaInUse() == Int8GemmIsa::kAvx512Bf16) {
    w.impl_->MatMulAvx512(x, m, y, accumulate);
  } else {
    w.impl_->MatMulGeneric(x, m, y, accumulate);
  }
  return absl::OkStatus();
}

Int8GemmIsa LimitInt8GemmIsa(Int8GemmIsa isa) {
  max_isa.store(isa, std::memory_order_relaxed);
  return Int8GemmIsaInUse();
}

Int8GemmIsa Int8GemmIsaInUse() {
  return max_isa.load(std::memory_order_relaxed) == Int8GemmIsa::kAvx512Bf16 && CpuHasAvx512Bf16()
             ? Int8GemmIsa::kAvx512Bf16
             : Int8GemmIsa::kGeneric;
}

}  // namespace tpserve
