// int8 weight-only GEMM for the CPU linear layers (`--quantization int8`): y = x · wᵀ
// with HF's [out, in] weight held as int8 with one fp32 scale per output channel
// (symmetric: scale = max|w_row| / 127, q = round(w / scale) in [-127, 127]), computed
// when the model loads. A decode step streams a quarter of fp32's bytes, half of bf16's.
//
// Numerics: each row of x is quantized to int16 with a power-of-two scale 2^e, the
// smallest with max|x_row| / 2^e ≤ 32767 (QuantizeRowToInt16): 15 bits relative to the
// row's largest value, where bf16 keeps 8 bits relative to each value — finer than the
// bf16 mode's rounding of x unless a value is over 2⁷ times smaller than its row's
// largest. Products x_q·q are exact integers, and so is their sum over each chunk of 512
// columns (int32: it stays below 2³¹); each chunk's sum is converted to fp32 once and the
// chunks' sums added in column order from 0; the result is 2^e · sum · scale. The error
// beyond the rounding of x is the weight's rounding to its grid, at most scale/2 per
// element, and a rounding per chunk. A row of x with a NaN or ±Inf gives NaN across its
// row of y, and only there.
//
// Kernels: with AVX512-VNNI (int8_avx512.h) the weight is laid out in pair-interleaved
// blocks of 48 outputs, each output summed in its own int32 lane with vpdpwssd, up to 8
// rows of x a pass; without it (or when LimitInt8GemmIsa said so before the weight was
// quantized) an AVX2 kernel takes 4 weight rows at a time with vpmaddwd and sums its
// lanes in int32. A chunk's integer sum is the same whatever adds it, so both kernels give
// the same bits, and a row of y is bit for bit the same whichever rows share the call.
// The compute threads (CpuThreads) split a call's output blocks.
//
// Threading: an Int8Weight is immutable after creation; MatMulInt8 may run on any
// threads at once.
#ifndef TPSERVE_WORKER_KERNELS_CPU_INT8_GEMM_H_
#define TPSERVE_WORKER_KERNELS_CPU_INT8_GEMM_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/functional/function_ref.h"
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
  // Rows [row0, row0 + rows) of an [n_out, k] bf16 weight, written into dst ([rows, k]).
  using Bf16RowSource =
      absl::FunctionRef<absl::Status(int64_t row0, int64_t rows, uint16_t* dst)>;
  // QuantizeBf16 over the rows `source` writes, asked for in order a chunk of at most
  // kSourceChunkBytes at a time, so that the whole bf16 weight is never held (a checkpoint
  // tensor is read straight into its int8 form). The same q and scales as QuantizeBf16
  // of the whole; a source's error is returned as it is, and a NaN/±Inf is named by its
  // row and column in the whole weight.
  static absl::StatusOr<Int8Weight> QuantizeBf16Rows(int64_t n_out, int64_t k,
                                                     Bf16RowSource source);
  static constexpr int64_t kSourceChunkBytes = int64_t{4} << 20;

  // An int8 weight quantized a row range at a time (below).
  class Builder;

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

// An int8 weight quantized a row range at a time, the ranges in any order (a merged
// linear's checkpoint tensors each bring their rows), then finished once every row is:
// the same q and scales as QuantizeBf16 of the whole, with no bf16 copy of it held.
class Int8Weight::Builder {
 public:
  // InvalidArgument on a non-positive size.
  static absl::StatusOr<Builder> Create(int64_t n_out, int64_t k);
  Builder(Builder&&) noexcept;
  Builder& operator=(Builder&&) noexcept;
  ~Builder();

  // Quantizes rows [row0, row0 + rows), asking `source` for them in order (its row0 is
  // the weight's row), a chunk of at most kSourceChunkBytes at a time. InvalidArgument
  // for rows outside the weight or quantized before, or naming a NaN/±Inf by its row
  // and column; a source's error is returned as it is.
  absl::Status QuantizeRows(int64_t row0, int64_t rows, Bf16RowSource source);
  // The weight; FailedPrecondition naming the first row never quantized (the builder
  // is left as it was).
  absl::StatusOr<Int8Weight> Finish();

 private:
  Builder(int64_t n_out, int64_t k, std::unique_ptr<Int8Weight::Impl> impl);
  int64_t n_out_ = 0;
  int64_t k_ = 0;
  std::unique_ptr<Int8Weight::Impl> impl_;
  std::vector<bool> done_;  // [n_out]: rows quantized so far
};

// x: [m, k] fp32 -> y: [m, n_out] fp32, y = x · (q · scale)ᵀ (y += … if accumulate). m may
// be 0. InvalidArgument on a negative m or null buffers.
absl::Status MatMulInt8(const float* x, int64_t m, const Int8Weight& w, float* y,
                        bool accumulate = false);

// x: [k] -> q: [k] int16 in [-32767, 32767] with x ≈ q · 2^e; returns 2^e (0 for an
// all-zero row; NaN, with q all zero, for a row holding a NaN or ±Inf). What MatMulInt8
// multiplies the weight by, exposed for tests.
float QuantizeRowToInt16(const float* x, int64_t k, int16_t* q);

// Which kernel weights quantized from now on are laid out for: kAvx512Vnni where the CPU
// has it (the default), kAvx2 always (the build's baseline, x86-64-v3). A weight keeps
// its kernel whatever is set later. Tests force kAvx2 to cover CPUs without AVX512-VNNI;
// returns the ISA now in effect.
enum class Int8GemmIsa { kAvx2, kAvx512Vnni };
Int8GemmIsa LimitInt8GemmIsa(Int8GemmIsa max_isa);
Int8GemmIsa Int8GemmIsaInUse();

}  // namespace tpserve

#endif  // TPSERVE_WORKER_KERNELS_CPU_INT8_GEMM_H_
