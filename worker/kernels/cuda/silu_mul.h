// CUDA SiLU·mul: out = silu(gate) · up over [n, 2·width] = [gate | up], fp32.
// The first kernel of the CUDA backend; its CPU reference is SiluMul in
// worker/kernels/cpu/norm_activation.h. Launches on `stream`; callers synchronise.
#ifndef TPSERVE_WORKER_KERNELS_CUDA_SILU_MUL_H_
#define TPSERVE_WORKER_KERNELS_CUDA_SILU_MUL_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace tpserve {

// gate_up and out are device pointers. Returns the launch's error code.
cudaError_t LaunchSiluMul(const float* gate_up, int64_t n, int64_t width, float* out,
                          cudaStream_t stream);

}  // namespace tpserve

#endif  // TPSERVE_WORKER_KERNELS_CUDA_SILU_MUL_H_
