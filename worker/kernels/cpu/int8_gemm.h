// int8 weight-only GEMM for the CPU linear layers (`--quantization int8`): y = x · wᵀ
// with HF's [out, in] weight held as int8 with one fp32 scale per output channel
// (symmetric: scale = max|w_row| / 127, q = round(w / scale) in [-127, 127]), computed
// when the model loads. A decode step streams a quarter of fp32's bytes, half of bf16's.
//
// Numerics: as MatMulBf16, x is rounded to bf16 (nearest even); every int8 value is
// exact in bf16, so each product x·q is exact in fp32 and summed in fp32; the row's
// scale multiplies the sum. The only error beyond the bf16 mode's is the weight's
// rounding to its grid, at most scale/2 per element.
//
// Kernels: with AVX512-BF16 the weight's int8 rows are widened to bf16 in registers (or
// once per block of output rows into an L1/L2 buffer when x has more rows than the
// registers hold) and multiplied with vdpbf16ps; without it (or when LimitInt8GemmIsa
// says so) int8 panels are widened to fp32 for OpenBLAS. Both give the same results up
// to fp32 summation order. A rank is one thread: MatMulInt8 runs on the calling thread.
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

// Which kernel MatMulInt8 may use in this process: kAvx512Bf16 where the CPU has it
// (the default), kGeneric (OpenBLAS on widened panels) always. Tests force kGeneric to
// cover CPUs without AVX512-BF16; returns the ISA now in effect.
enum class Int8GemmIsa { kGeneric, kAvx512Bf16 };
Int8GemmIsa LimitInt8GemmIsa(Int8GemmIsa max_isa);
Int8GemmIsa Int8GemmIsaInUse();

}  // namespace tpserve

#endif  // TPSERVE_WORKER_KERNELS_CPU_INT8_GEMM_H_
