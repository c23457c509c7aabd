// int8 weight-only GEMM for the CPU linear layers (`--quantization int8`): y = x · wᵀ
// with HF's [out, in] weight held as int8 with one fp32 scale per output channel
// (symmetric: scale = max|w_row| / 127, q = round(w / scale) in [-127, 127]), computed
// when the model loads. A decode step streams a quarter of fp32's bytes, half of bf16's.
//
// Numerics: each row of x is quantized to int16 with a power-of-two scale 2^e, the
// smallest with max|x_row| / 2^e ≤ 32767 (QuantizeRowToInt16): 15 bits relative to the
// row's largest value, where bf16 keeps 8 bits relative to each value — finer than the
// bf16 mode's rounding of x unless a value is over 2⁷ times smaller than its row's
// largest. Products x_q·q and their sums are exact integers (int32 lanes, added into
// fp32 every 4,096 columns); the result is 2^e · scale · sum. The error beyond the
// rounding of x is the weight's rounding to its grid, at most scale/2 per element. A row
// of x with a NaN or ±Inf gives NaN across its row of y, and only there.
//
// Kernels: with AVX512-VNNI the weight's int8 rows are sign-extended to int16 in
// registers and multiplied with vpdpwssd, 4 output rows by up to 6 rows of x at a time;
// without it (or when LimitInt8GemmIsa says so) an AVX2 kernel does the same integer
// arithmetic with vpmaddwd and vpaddd in two 256-bit halves and sums the lanes by the same
// tree, so both give the same bits. They add in one fixed order whatever m, so a row of y
// is bit for bit the same whichever rows share the call. A rank is one thread:
// MatMulInt8 runs on the calling thread.
//
// Threading: an Int8Weight is immutable after creation; MatMulInt8 may run on any
// threads at once.
#ifndef TPSERVE_WORKER_KERNELS_CPU_INT8_GEMM_H_
#define TPSERVE_WORKER_KERNELS_CPU_INT8_GEMM_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/kernels/cpu/packed_weight.h"

namespace tpserve {

class Int8Weight : public PackedWeight {
 public:
  // data: [n_out, k] row-major bf16 bits; read once, not kept. InvalidArgument on a
  // non-positive size or a NaN/±Inf weight.
  static absl::StatusOr<Int8Weight> QuantizeBf16(const uint16_t* data, int64_t n_out, int64_t k);
  // data: [n_out, k] fp32, quantized from the fp32 values themselves (no bf16 rounding).
  static absl::StatusOr<Int8Weight> QuantizeFloat(const float* data, int64_t n_out, int64_t k);

  Int8Weight(Int8Weight&&) noexcept;
  Int8Weight& operator=(Int8Weight&&) noexcept;
  ~Int8Weight() override;

  absl::Status MatMul(const float* x, int64_t m, float* y, bool accumulate) const override;
  WeightFormat format() const override { return WeightFormat::kInt8; }
  int64_t n_out() const override { return n_out_; }
  int64_t k() const override { return k_; }
  size_t bytes() const override;

  // The quantized weight as the kernels see it, for tests: element (row, col) and the
  // row's scale; w ≈ q · scale.
  int8_t q(int64_t row, int64_t col) const;
  float scale(int64_t row) const;

 private:
  struct Impl;
  friend absl::Status MatMulInt8(const float* x, int64_t m, const Int8Weight& w, float* y,
                                 bool accumulate);
  Int8Weight(int64_t n_out, int64_t k, std::unique_ptr<Impl> impl);

  int64_t n_out_ = 0;
  int64_t k_ = 0;
  std::unique_ptr<Impl> impl_;
};

// x: [m, k] fp32 -> y: [m, n_out] fp32, y = x · (q · scale)ᵀ (y += … if accumulate). m may
// be 0. InvalidArgument on a negative m or null buffers.
absl::Status MatMulInt8(const float* x, int64_t m, const Int8Weight& w, float* y,
                        bool accumulate = false);

// x: [k] -> q: [k] int16 in [-32767, 32767] with x ≈ q · 2^e; returns 2^e (0 for an
// all-zero row; NaN, with q all zero, for a row holding a NaN or ±Inf). What MatMulInt8
// multiplies the weight by, exposed for tests.
float QuantizeRowToInt16(const float* x, int64_t k, int16_t* q);

// Which kernel MatMulInt8 may use in this process: kAvx512Vnni where the CPU has it
// (the default), kAvx2 always (the build's baseline, x86-64-v3). Tests force kAvx2 to
// cover CPUs without AVX512-VNNI; returns the ISA now in effect.
enum class Int8GemmIsa { kAvx2, kAvx512Vnni };
Int8GemmIsa LimitInt8GemmIsa(Int8GemmIsa max_isa);
Int8GemmIsa Int8GemmIsaInUse();

}  // namespace tpserve

#endif  // TPSERVE_WORKER_KERNELS_CPU_INT8_GEMM_H_
