// bf16-weight GEMM for the CPU linear layers: y = x · wᵀ with HF's [out, in] weight
// layout, the weight held in bf16 (half of fp32's memory and of its bytes streamed per
// decode step), activations and accumulation in fp32.
//
// A PackedBf16Weight is packed once, when the model loads, into blocks of k pairs that a
// kernel reads directly (oneDNN's brgemm: BA16a64b2a on AVX512-BF16 and AMX); MatMulBf16
// then never repacks it, so a decode step streams each weight once whatever the batch.
// Where oneDNN has no such implementation (no AVX512-BF16: it would only offer a GEMM
// that repacks per call, and below AVX-512 no bf16 matmul at all) the weight is packed
// for this project's AVX2 kernel instead (bf16_avx2.h: 16-row blocks, widened in
// registers, FMA in fp32). Where oneDNN has such a layout the products run in this
// project's kernels, on a layout of their own: vdpbf16ps (bf16_avx512.h) on oneDNN's
// pair-interleaved blocks but of 48 outputs (a pass of up to 8 rows), or on AMX CPUs the
// tile kernel (bf16_amx.h) on blocks of 64 packed tile by tile (each AMX B tile 1 KiB in
// one piece, loaded faster); oneDNN's matmul reads neither, and runs on its own packing
// only under SetBf16Kernel(kOneDnn) (tests and benchmarks compare). The paths give the
// same results up to fp32 summation order; every project kernel's order is fixed, so a
// row of y does not depend on its batch (oneDNN's matmul, kept behind SetBf16Kernel,
// changes with the row count).
//
// Numerics: x is rounded to bf16 (nearest even) before the products, which are exact
// in fp32 and summed in fp32. Non-finite weights are rejected at packing, as the
// checkpoint loader does; NaN or ±Inf in x propagate to the rows of y they touch. On the
// oneDNN path bf16 subnormals (below 1.2e-38) count as zero, as the bf16 instructions
// treat them.
//
// Threading: a PackedBf16Weight is immutable after creation; MatMulBf16 may run on any
// threads at once, including on one weight (its primitive cache is locked).
#ifndef TPSERVE_WORKER_KERNELS_CPU_BF16_GEMM_H_
#define TPSERVE_WORKER_KERNELS_CPU_BF16_GEMM_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/kernels/cpu/packed_weight.h"
#include "worker/tensor.h"

namespace tpserve {

class PackedBf16Weight : public PackedWeight {
 public:
  // data: [n_out, k] row-major bf16 bits, e.g. a safetensors BF16 tensor as stored; it
  // is read once and not kept. InvalidArgument on a non-positive size or a NaN/±Inf.
  static absl::StatusOr<PackedBf16Weight> FromBf16(const uint16_t* data, int64_t n_out,
                                                   int64_t k);
  // data: [n_out, k] fp32, rounded to bf16 (nearest even); a value that rounds to ±Inf
  // is rejected like a non-finite one.
  static absl::StatusOr<PackedBf16Weight> FromFloat(const float* data, int64_t n_out,
                                                    int64_t k);

  PackedBf16Weight(PackedBf16Weight&&) noexcept;
  PackedBf16Weight& operator=(PackedBf16Weight&&) noexcept;
  ~PackedBf16Weight() override;

  // MatMulBf16.
  absl::Status MatMul(const float* x, int64_t m, float* y, bool accumulate) const override;
  WeightFormat format() const override { return WeightFormat::kBf16; }
  int64_t n_out() const override { return n_out_; }
  int64_t k() const override { return k_; }
  // Bytes the packed weight occupies (oneDNN and the AMX layout pad k to 32 and n_out to
  // 64, the vdpbf16ps layout k to 32 and n_out to 48; the AVX2 layout k to 16 and n_out
  // to 4).
  size_t bytes() const override;
  // True when the weight is in oneDNN's packed layout; false on the AVX2 kernel's path
  // and in the AMX and vdpbf16ps kernels' own layouts.
  bool packed_for_onednn() const;
  // True when MatMul runs bf16_amx.h's kernel on it: packed on an AMX CPU under
  // Bf16Kernel::kOwn (the tile kernel's own layout: always), or in oneDNN's layout on an
  // AMX CPU while Bf16Kernel::kOwn is set.
  bool runs_on_amx() const;
  // True when MatMul runs bf16_avx512.h's kernel on it: packed on an AVX512-BF16 CPU
  // without AMX under Bf16Kernel::kOwn (its own layout: always), or in oneDNN's layout
  // while Bf16Kernel::kAvx512Bf16 is set (or kOwn, without AMX).
  bool runs_on_avx512_bf16() const;
  // How many matmul primitives this weight has created so far (for tests: at most
  // 2·kRowsPerPrimitive per thread count, whatever the row counts seen).
  size_t num_cached_primitives() const;

  // Rows per oneDNN primitive: larger calls run as chunks of this many rows plus one
  // remainder chunk, so a weight needs primitives for 1..64 rows only (see .cc).
  static constexpr int64_t kRowsPerPrimitive = 64;

 private:
  struct Impl;
  friend absl::Status MatMulBf16(const float* x, int64_t m, const PackedBf16Weight& w,
                                 float* y, bool accumulate);
  PackedBf16Weight(int64_t n_out, int64_t k, std::unique_ptr<Impl> impl);

  int64_t n_out_ = 0;
  int64_t k_ = 0;
  std::unique_ptr<Impl> impl_;
};

// x: [m, k] fp32 -> y: [m, n_out] fp32, y = x · wᵀ (y += x · wᵀ if accumulate). m may be
// 0. InvalidArgument on a negative m or null buffers; Internal if oneDNN fails.
absl::Status MatMulBf16(const float* x, int64_t m, const PackedBf16Weight& w, float* y,
                        bool accumulate = false);

// Sets how many OpenMP threads oneDNN uses for MatMulBf16 and packing in this process
// (one rank = one process), as SetGemmThreads does for OpenBLAS; the AVX2 kernel always
// runs on the calling thread. OpenMP keeps the count per calling thread, so each call applies it to its own
// thread. Until this is called (or with threads <= 0) OpenMP's default applies:
// OMP_NUM_THREADS, else every core.
void SetBf16GemmThreads(int threads);

// Which kernel MatMulBf16 runs on weights oneDNN packed, for the whole process: this
// project's own (kOwn, the default: AMX tiles where the CPU has them, else AVX512-BF16
// dot products), the AVX512-BF16 one even on an AMX CPU (kAvx512Bf16), or oneDNN's matmul
// (kOneDnn). Tests and benchmarks compare them; only the project's kernels keep a row's
// bits independent of the batch. It also picks the layout of weights packed while it is
// set: on an AMX CPU, kOwn packs for the tile kernel alone, the others in oneDNN's layout.
enum class Bf16Kernel { kOwn, kAvx512Bf16, kOneDnn };
void SetBf16Kernel(Bf16Kernel kernel);

}  // namespace tpserve

#endif  // TPSERVE_WORKER_KERNELS_CPU_BF16_GEMM_H_
