// A linear layer's weight held by the CPU backend in a format narrower than fp32 and
// multiplied without ever widening it back in memory: bf16 (PackedBf16Weight,
// bf16_gemm.h) or int8 with a scale per output channel (Int8Weight, int8_gemm.h). The
// layers hold one behind this interface and do not care which.
//
// Threading: a PackedWeight is immutable after creation; MatMul may run on any threads.
#ifndef TPSERVE_WORKER_KERNELS_CPU_PACKED_WEIGHT_H_
#define TPSERVE_WORKER_KERNELS_CPU_PACKED_WEIGHT_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace tpserve {

enum class WeightFormat { kBf16, kInt8 };

class PackedWeight {
 public:
  virtual ~PackedWeight() = default;

  // x: [m, k] fp32 -> y: [m, n_out] fp32, y = x · wᵀ (y += x · wᵀ if accumulate). m may
  // be 0. InvalidArgument on a negative m or null buffers.
  virtual absl::Status MatMul(const float* x, int64_t m, float* y, bool accumulate) const = 0;

  virtual WeightFormat format() const = 0;
  virtual int64_t n_out() const = 0;
  virtual int64_t k() const = 0;
  // Bytes the weight occupies in memory (what a decode step streams).
  virtual size_t bytes() const = 0;
};

}  // namespace tpserve

#endif  // TPSERVE_WORKER_KERNELS_CPU_PACKED_WEIGHT_H_
