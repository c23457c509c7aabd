// CPU GEMM for the linear layers: y = x · wᵀ with HF's [out, in] weight layout.
//
// Backed by OpenBLAS (sgemm); MatMulTransBReference is the plain triple loop the
// tests compare it with. Both are reentrant.
#ifndef TPSERVE_WORKER_KERNELS_CPU_GEMM_H_
#define TPSERVE_WORKER_KERNELS_CPU_GEMM_H_

#include <cstdint>

namespace tpserve {

// x: [n, k], w: [m, k] -> y: [n, m]. If accumulate, y += x · wᵀ, else y = x · wᵀ.
void MatMulTransB(const float* x, const float* w, int64_t n, int64_t k, int64_t m, float* y,
                  bool accumulate = false);
void MatMulTransBReference(const float* x, const float* w, int64_t n, int64_t k, int64_t m,
                           float* y, bool accumulate = false);

// Sets how many threads OpenBLAS may use in this process (one rank = one process).
void SetGemmThreads(int threads);

}  // namespace tpserve

#endif  // TPSERVE_WORKER_KERNELS_CPU_GEMM_H_
