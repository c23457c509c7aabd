// LaunchKernel: how the kernels here are launched, so that the same .cu sources launch on
// a device (nvcc) and on the CPU emulator (emu/emu.h, compiled as C++ with
// -DTPSERVE_CUDA_EMULATOR). Textual header for .cu files; host code only.
#ifndef TPSERVE_WORKER_KERNELS_CUDA_LAUNCH_CUH_
#define TPSERVE_WORKER_KERNELS_CUDA_LAUNCH_CUH_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#if defined(TPSERVE_CUDA_EMULATOR)
#include "testing/cuda_emu/emu.h"
#endif

namespace tpserve {

// kernel<<<grid, block, smem_bytes, stream>>>(args...), then the launch's error
// (cudaGetLastError). args convert to the kernel's parameter types.
template <typename... Params, typename... Args>
cudaError_t LaunchKernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes,
                         cudaStream_t stream, Args&&... args) {
#if defined(TPSERVE_CUDA_EMULATOR)
  emu::Launch(kernel, grid, block, smem_bytes, stream, std::forward<Args>(args)...);
#else
  kernel<<<grid, block, smem_bytes, stream>>>(std::forward<Args>(args)...);
#endif
  return cudaGetLastError();
}

}  // namespace tpserve

#endif  // TPSERVE_WORKER_KERNELS_CUDA_LAUNCH_CUH_
