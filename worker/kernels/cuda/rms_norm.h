// CUDA RMSNorm, plain and fused with the residual add, one block per row. The CPU
// references are RmsNorm and AddRmsNorm in worker/kernels/cpu/norm_activation.h.
//
// T is float or __nv_bfloat16; sums of squares are fp32 and the output is rounded to T
// once. Launches on `stream` and returns the launch's error (cudaErrorInvalidValue for
// negative sizes, cudaSuccess without a launch for empty ones); no allocation, no sync,
// and the launch shape depends only on the sizes, so the launch can be graph-captured.
#ifndef TPSERVE_WORKER_KERNELS_CUDA_RMS_NORM_H_
#define TPSERVE_WORKER_KERNELS_CUDA_RMS_NORM_H_

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace tpserve {

// out = x / sqrt(mean(x²) + eps) · weight, per row.
template <typename T>
cudaError_t LaunchRmsNorm(const T* x,       // [n, dim]
                          const T* weight,  // [dim]
                          int64_t n, int64_t dim, float eps,
                          T* out,  // [n, dim]; may alias x
                          cudaStream_t stream);

// residual += x, rounded to T (HF adds residuals in the model dtype); then
// out = RmsNorm(residual).
template <typename T>
cudaError_t LaunchAddRmsNorm(T* residual,      // [n, dim], updated in place
                             const T* x,       // [n, dim]
                             const T* weight,  // [dim]
                             int64_t n, int64_t dim, float eps,
                             T* out,  // [n, dim]; may alias x, not residual
                             cudaStream_t stream);

}  // namespace tpserve

#endif  // TPSERVE_WORKER_KERNELS_CUDA_RMS_NORM_H_
