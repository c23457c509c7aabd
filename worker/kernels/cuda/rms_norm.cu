#include "worker/kernels/cuda/rms_norm.h"

#include <algorithm>
#include <limits>
#include <type_traits>

#include "worker/kernels/cuda/launch.cuh"
#include "worker/kernels/cuda/vec.cuh"

namespace tpserve {
namespace {

constexpr int kMaxThreads = 1024;

// The sum of v over the block, returned to every thread. blockDim.x is a multiple of 32.
// Called once per kernel: the partials are not reset for a second use.
__device__ __forceinline__ float BlockSum(float v) {
  __shared__ float partial[kMaxThreads / 32];
  TPSERVE_SHARED_POISON(partial);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = WarpSum(v);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  return WarpSum(lane < static_cast<int>(blockDim.x / 32) ? partial[lane] : 0.0f);
}

// One block per row, N elements per access. With kAdd, the row is residual + x (rounded
// to T and written back to residual) instead of x. Each thread reads and writes the same
// chunks in both passes, and the passes are split by BlockSum's barrier, so out may
// alias x.
template <typename T, int N, bool kAdd>
__global__ void __launch_bounds__(kMaxThreads)
    RmsNormKernel(T* residual, const T* x, const T* weight, int dim, float eps, T* out) {
  const int64_t row = int64_t{blockIdx.x} * dim;
  const int chunks = dim / N;
  float sum_sq = 0.0f;
  for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
    float v[N];
    Load(x + row + c * N, v);
    if constexpr (kAdd) {
      float r[N];
      Load(residual + row + c * N, r);
#pragma unroll
      for (int k = 0; k < N; ++k) v[k] = ToFloat(FromFloat<T>(r[k] + v[k]));
      Store(residual + row + c * N, v);
    }
#pragma unroll
    for (int k = 0; k < N; ++k) sum_sq += v[k] * v[k];
  }
  const float inv = rsqrtf(BlockSum(sum_sq) / static_cast<float>(dim) + eps);
  const T* normed = kAdd ? residual : x;
  for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
    float v[N], w[N];
    Load(normed + row + c * N, v);
    Load(weight + c * N, w);
#pragma unroll
    for (int k = 0; k < N; ++k) v[k] = w[k] * (v[k] * inv);
    Store(out + row + c * N, v);
  }
}

template <typename T, bool kAdd>
cudaError_t Launch(T* residual, const T* x, const T* weight, int64_t n, int64_t dim, float eps,
                   T* out, cudaStream_t stream) {
  constexpr int64_t kMaxInt = std::numeric_limits<int>::max();
  if (n < 0 || dim < 0 || n > kMaxInt || dim > kMaxInt) return cudaErrorInvalidValue;
  if (n == 0 || dim == 0) return cudaSuccess;
  const bool vector = dim % kVec<T> == 0 && Aligned16(residual) && Aligned16(x) &&
                      Aligned16(weight) && Aligned16(out);
  const int64_t chunks = vector ? dim / kVec<T> : dim;
  const int threads = static_cast<int>(std::min<int64_t>(kMaxThreads, (chunks + 31) / 32 * 32));
  const auto kernel = vector ? RmsNormKernel<T, kVec<T>, kAdd> : RmsNormKernel<T, 1, kAdd>;
  return LaunchKernel(kernel, static_cast<unsigned>(n), threads, 0, stream, residual, x, weight,
                      static_cast<int>(dim), eps, out);
}

}  // namespace

template <typename T>
cudaError_t LaunchRmsNorm(const T* x, const T* weight, int64_t n, int64_t dim, float eps, T* out,
                          cudaStream_t stream) {
  return Launch<T, false>(nullptr, x, weight, n, dim, eps, out, stream);
}

template <typename T>
cudaError_t LaunchAddRmsNorm(T* residual, const T* x, const T* weight, int64_t n, int64_t dim,
                             float eps, T* out, cudaStream_t stream) {
  return Launch<T, true>(residual, x, weight, n, dim, eps, out, stream);
}

template cudaError_t LaunchRmsNorm(const float*, const float*, int64_t, int64_t, float, float*,
                                   cudaStream_t);
template cudaError_t LaunchRmsNorm(const __nv_bfloat16*, const __nv_bfloat16*, int64_t, int64_t,
                                   float, __nv_bfloat16*, cudaStream_t);
template cudaError_t LaunchAddRmsNorm(float*, const float*, const float*, int64_t, int64_t, float,
                                      float*, cudaStream_t);
template cudaError_t LaunchAddRmsNorm(__nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*,
                                      int64_t, int64_t, float, __nv_bfloat16*, cudaStream_t);

}  // namespace tpserve
