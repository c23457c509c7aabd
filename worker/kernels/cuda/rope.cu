#include "worker/kernels/cuda/rope.h"

#include <limits>
#include <type_traits>

#include "worker/kernels/cuda/launch.cuh"
#include "worker/kernels/cuda/vec.cuh"

namespace tpserve {
namespace {

constexpr int kWarps = 4;  // heads per block

// One warp per (token, head). Lane l owns the slots s = l + 32·k; slot s is the N pairs
// starting at element s·N of each half. The whole head stays in registers between the
// norm and the rotation, so every element is read once and written once. A row's heads
// are its q heads, its k heads and, with a cache (cache.slots set), its v heads, which are
// only copied; k heads then go to the cache instead of back into the row.
template <typename T, int N>
__global__ void __launch_bounds__(kWarps * 32)
    RopeKernel(T* __restrict__ qkv, int64_t row_stride, const int32_t* __restrict__ positions,
               int64_t total_heads, int heads_per_row, int num_q_heads, int num_kv_heads,
               int head_dim, const float* __restrict__ cos_sin, const T* __restrict__ q_norm,
               const T* __restrict__ k_norm, float eps, RopeCacheWrite<T> cache) {
  constexpr int kSlots = kRopeMaxHeadDim / 2 / 32 / N > 0 ? kRopeMaxHeadDim / 2 / 32 / N : 1;
  const int64_t head_index = int64_t{blockIdx.x} * kWarps + threadIdx.x / 32;
  if (head_index >= total_heads) return;  // the whole warp: the shuffles below stay full
  const int lane = threadIdx.x % 32;
  const int64_t token = head_index / heads_per_row;
  const int head = static_cast<int>(head_index - token * heads_per_row);
  const int half = head_dim / 2;
  T* x = qkv + token * row_stride + int64_t{head} * head_dim;
  T* out = x;  // where the rotated head goes
  if (cache.slots != nullptr && head >= num_q_heads) {
    const int64_t slot = cache.slots[token];
    if (slot < 0) return;  // padding: the whole warp
    const int kv_head = head - num_q_heads;
    if (kv_head >= num_kv_heads) {  // a v head: copied as it is
      const int dv = cache.v_head_dim, v = kv_head - num_kv_heads;
      const T* from = qkv + token * row_stride + cache.v_col + int64_t{v} * dv;
      T* to = cache.v_cache + (slot * num_kv_heads + v) * dv;
      for (int i = lane * N; i < dv; i += 32 * N) {
        StoreVec(to + i, LoadVec<Chunk<T, N>>(from + i));
      }
      return;
    }
    out = cache.k_cache + (slot * num_kv_heads + kv_head) * head_dim;
  }

  float a[kSlots][N], b[kSlots][N];  // first and second half
  float sum_sq = 0.0f;
#pragma unroll
  for (int k = 0; k < kSlots; ++k) {
    const int i = (lane + 32 * k) * N;
    if (i >= half) continue;
    Load(x + i, a[k]);
    Load(x + half + i, b[k]);
#pragma unroll
    for (int j = 0; j < N; ++j) sum_sq += a[k][j] * a[k][j] + b[k][j] * b[k][j];
  }

  const T* norm = head < num_q_heads ? q_norm : k_norm;
  if (norm != nullptr) {  // the same for the whole warp
    const float inv = rsqrtf(WarpSum(sum_sq) / static_cast<float>(head_dim) + eps);
#pragma unroll
    for (int k = 0; k < kSlots; ++k) {
      const int i = (lane + 32 * k) * N;
      if (i >= half) continue;
      float wa[N], wb[N];
      Load(norm + i, wa);
      Load(norm + half + i, wb);
#pragma unroll
      for (int j = 0; j < N; ++j) {
        a[k][j] = wa[j] * (a[k][j] * inv);
        b[k][j] = wb[j] * (b[k][j] * inv);
      }
    }
  }

  const float* cos_row = cos_sin + int64_t{positions[token]} * head_dim;
  const float* sin_row = cos_row + half;
#pragma unroll
  for (int k = 0; k < kSlots; ++k) {
    const int i = (lane + 32 * k) * N;
    if (i >= half) continue;
    float c[N], s[N], ra[N], rb[N];
    Load(cos_row + i, c);
    Load(sin_row + i, s);
#pragma unroll
    for (int j = 0; j < N; ++j) {
      ra[j] = a[k][j] * c[j] - b[k][j] * s[j];
      rb[j] = b[k][j] * c[j] + a[k][j] * s[j];
    }
    Store(out + i, ra);
    Store(out + half + i, rb);
  }
}

// The widest N (pairs per access) that keeps all 32 lanes busy and every access aligned.
template <typename T>
int PairsPerAccess(const T* qkv, int64_t row_stride, int head_dim, const float* cos_sin,
                   const T* q_norm, const T* k_norm, const RopeCacheWrite<T>& cache) {
  const int half = head_dim / 2;
  int n = 1;
  for (int wider = 2; wider <= kVec<T> && 32 * wider <= half; wider *= 2) {
    const int bytes = wider * sizeof(T);
    bool aligned = half % wider == 0 && row_stride % wider == 0 && Aligned(qkv, bytes) &&
                   Aligned(q_norm, bytes) && Aligned(k_norm, bytes) &&
                   Aligned(cos_sin, wider * 4 < 16 ? wider * 4 : 16);
    if (cache.slots != nullptr) {
      aligned = aligned && cache.v_col % wider == 0 && cache.v_head_dim % wider == 0 &&
                Aligned(cache.k_cache, bytes) && Aligned(cache.v_cache, bytes);
    }
    if (!aligned) break;
    n = wider;
  }
  return n;
}

template <typename T>
cudaError_t Launch(T* qkv, int64_t row_stride, const int32_t* positions, int64_t n,
                   int num_q_heads, int num_kv_heads, int head_dim, const float* cos_sin,
                   const T* q_norm, const T* k_norm, float eps, const RopeCacheWrite<T>& cache,
                   cudaStream_t stream) {
  if (n < 0 || num_q_heads < 0 || num_kv_heads < 0 || head_dim < 2 || head_dim % 2 != 0 ||
      head_dim > kRopeMaxHeadDim) {
    return cudaErrorInvalidValue;
  }
  const bool caching = cache.slots != nullptr;
  const int heads_per_row = num_q_heads + num_kv_heads * (caching ? 2 : 1);
  if (row_stride < int64_t{num_q_heads + num_kv_heads} * head_dim) return cudaErrorInvalidValue;
  const int64_t total_heads = n * heads_per_row;
  if (total_heads == 0) return cudaSuccess;
  const int64_t blocks = (total_heads + kWarps - 1) / kWarps;
  if (blocks > std::numeric_limits<int>::max() || positions == nullptr || cos_sin == nullptr) {
    return cudaErrorInvalidValue;
  }
  const int pairs = PairsPerAccess(qkv, row_stride, head_dim, cos_sin, q_norm, k_norm, cache);
  auto kernel = pairs == 4 ? RopeKernel<T, 4> : pairs == 2 ? RopeKernel<T, 2> : RopeKernel<T, 1>;
  if constexpr (kVec<T> == 8) {
    if (pairs == 8) kernel = RopeKernel<T, 8>;
  }
  return LaunchKernel(kernel, static_cast<unsigned>(blocks), kWarps * 32, 0, stream, qkv,
                      row_stride, positions, total_heads, heads_per_row, num_q_heads,
                      num_kv_heads, head_dim, cos_sin, q_norm, k_norm, eps, cache);
}

}  // namespace

template <typename T>
cudaError_t LaunchRope(T* qkv, int64_t row_stride, const int32_t* positions, int64_t n,
                       int num_q_heads, int num_kv_heads, int head_dim, const float* cos_sin,
                       const T* q_norm, const T* k_norm, float eps, cudaStream_t stream) {
  return Launch(qkv, row_stride, positions, n, num_q_heads, num_kv_heads, head_dim, cos_sin,
                q_norm, k_norm, eps, RopeCacheWrite<T>{}, stream);
}

template <typename T>
cudaError_t LaunchRopeWriteKv(T* qkv, int64_t row_stride, const int32_t* positions, int64_t n,
                              int num_q_heads, int num_kv_heads, int head_dim,
                              const float* cos_sin, const T* q_norm, const T* k_norm, float eps,
                              const RopeCacheWrite<T>& cache, cudaStream_t stream) {
  const int64_t v_end = cache.v_col + int64_t{num_kv_heads} * cache.v_head_dim;
  if (num_kv_heads < 1 || cache.v_head_dim < 1 || cache.v_col < 0 || row_stride < v_end) {
    return cudaErrorInvalidValue;
  }
  if (n == 0) return cudaSuccess;
  if (cache.slots == nullptr || cache.k_cache == nullptr || cache.v_cache == nullptr) {
    return cudaErrorInvalidValue;
  }
  return Launch(qkv, row_stride, positions, n, num_q_heads, num_kv_heads, head_dim, cos_sin,
                q_norm, k_norm, eps, cache, stream);
}

template cudaError_t LaunchRope(float*, int64_t, const int32_t*, int64_t, int, int, int,
                                const float*, const float*, const float*, float, cudaStream_t);
template cudaError_t LaunchRope(__nv_bfloat16*, int64_t, const int32_t*, int64_t, int, int, int,
                                const float*, const __nv_bfloat16*, const __nv_bfloat16*, float,
                                cudaStream_t);
template cudaError_t LaunchRopeWriteKv(float*, int64_t, const int32_t*, int64_t, int, int, int,
                                       const float*, const float*, const float*, float,
                                       const RopeCacheWrite<float>&, cudaStream_t);
template cudaError_t LaunchRopeWriteKv(__nv_bfloat16*, int64_t, const int32_t*, int64_t, int,
                                       int, int, const float*, const __nv_bfloat16*,
                                       const __nv_bfloat16*, float,
                                       const RopeCacheWrite<__nv_bfloat16>&, cudaStream_t);

}  // namespace tpserve
