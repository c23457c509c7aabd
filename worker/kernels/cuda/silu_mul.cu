#include "worker/kernels/cuda/silu_mul.h"

namespace tpserve {
namespace {

__global__ void SiluMulKernel(const float* __restrict__ gate_up, int64_t n, int64_t width,
                              float* __restrict__ out) {
  const int64_t total = n * width;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = i / width, col = i % width;
    const float g = gate_up[row * 2 * width + col];
    const float u = gate_up[row * 2 * width + width + col];
    out[i] = g / (1.0f + __expf(-g)) * u;
  }
}

}  // namespace

cudaError_t LaunchSiluMul(const float* gate_up, int64_t n, int64_t width, float* out,
                          cudaStream_t stream) {
  const int64_t total = n * width;
  if (total == 0) return cudaSuccess;
  constexpr int kThreads = 256;
  const int blocks = static_cast<int>(std::min<int64_t>((total + kThreads - 1) / kThreads, 65535));
  SiluMulKernel<<<blocks, kThreads, 0, stream>>>(gate_up, n, width, out);
  return cudaGetLastError();
}

}  // namespace tpserve
