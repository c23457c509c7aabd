// CUDA act·mul of the gated MLP: out = act(gate) · up over [n, 2·width] = [gate | up], act
// one of worker/kernels/activation.h. Its CPU reference is ActMul in
// worker/kernels/cpu/norm_activation.h; both evaluate the same scalar Activate().
//
// T is float or __nv_bfloat16; the math is fp32 and the output is rounded to T. Launches
// on `stream` and returns the launch's error (cudaErrorInvalidValue for negative sizes,
// cudaSuccess without a launch for empty ones); no allocation, no sync, and the launch
// shape depends only on the sizes, so the launch can be graph-captured.
#ifndef TPSERVE_WORKER_KERNELS_CUDA_ACT_MUL_H_
#define TPSERVE_WORKER_KERNELS_CUDA_ACT_MUL_H_

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "worker/kernels/activation.h"

namespace tpserve {

template <typename T>
cudaError_t LaunchActMul(Activation act,
                         const T* gate_up,  // [n, 2·width] = [gate | up]
                         int64_t n, int64_t width,
                         T* out,  // [n, width]; must not overlap gate_up
                         cudaStream_t stream);

}  // namespace tpserve

#endif  // TPSERVE_WORKER_KERNELS_CUDA_ACT_MUL_H_
