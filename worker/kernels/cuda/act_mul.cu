#include "worker/kernels/cuda/act_mul.h"

#include <algorithm>
#include <limits>
#include <type_traits>

#include "worker/kernels/cuda/launch.cuh"
#include "worker/kernels/cuda/vec.cuh"

namespace tpserve {
namespace {

constexpr int kMaxThreads = 256;

// Grid (n, column blocks): each thread does N consecutive columns of one row, so no
// thread divides by the width.
template <typename T, int N, Activation kAct>
__global__ void __launch_bounds__(kMaxThreads)
    ActMulKernel(const T* __restrict__ gate_up, int width, T* __restrict__ out) {
  const int col = (blockIdx.y * blockDim.x + threadIdx.x) * N;
  if (col >= width) return;
  const T* gate = gate_up + int64_t{blockIdx.x} * 2 * width + col;
  float g[N], u[N];
  Load(gate, g);
  Load(gate + width, u);
#pragma unroll
  for (int k = 0; k < N; ++k) g[k] = Activate(kAct, g[k]) * u[k];
  Store(out + int64_t{blockIdx.x} * width + col, g);
}

template <typename T, Activation kAct>
auto KernelFor(bool vector) {
  return vector ? ActMulKernel<T, kVec<T>, kAct> : ActMulKernel<T, 1, kAct>;
}

}  // namespace

template <typename T>
cudaError_t LaunchActMul(Activation act, const T* gate_up, int64_t n, int64_t width, T* out,
                         cudaStream_t stream) {
  constexpr int64_t kMaxInt = std::numeric_limits<int>::max();
  if (n < 0 || width < 0 || n > kMaxInt || width > kMaxInt / 2) return cudaErrorInvalidValue;
  if (n == 0 || width == 0) return cudaSuccess;
  const bool vector = width % kVec<T> == 0 && Aligned16(gate_up) && Aligned16(out);
  const int64_t per_row = vector ? width / kVec<T> : width;
  const int threads = static_cast<int>(std::min<int64_t>(kMaxThreads, (per_row + 31) / 32 * 32));
  const int64_t column_blocks = (per_row + threads - 1) / threads;
  if (column_blocks > 65535) return cudaErrorInvalidValue;  // gridDim.y's limit
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(column_blocks));
  // One instantiation per activation: the switch stays out of the inner loop.
  decltype(KernelFor<T, Activation::kSilu>(vector)) kernel = nullptr;
  switch (act) {
    case Activation::kSilu: kernel = KernelFor<T, Activation::kSilu>(vector); break;
    case Activation::kGelu: kernel = KernelFor<T, Activation::kGelu>(vector); break;
    case Activation::kGeluTanh: kernel = KernelFor<T, Activation::kGeluTanh>(vector); break;
    case Activation::kRelu: kernel = KernelFor<T, Activation::kRelu>(vector); break;
  }
  if (kernel == nullptr) return cudaErrorInvalidValue;
  return LaunchKernel(kernel, grid, threads, 0, stream, gate_up, static_cast<int>(width), out);
}

template cudaError_t LaunchActMul(Activation, const float*, int64_t, int64_t, float*,
                                  cudaStream_t);
template cudaError_t LaunchActMul(Activation, const __nv_bfloat16*, int64_t, int64_t,
                                  __nv_bfloat16*, cudaStream_t);

}  // namespace tpserve
