// LaunchWriteKv (paged_attention.h): one CTA per token copies its keys and values from the
// fused qkv row into its cache slot, in 16-byte chunks where both sides allow.
#include <climits>
#include <cstdint>

#include "worker/kernels/cuda/launch.cuh"
#include "worker/kernels/cuda/paged_attention.h"
#include "worker/kernels/cuda/vec.cuh"

namespace tpserve {
namespace {

constexpr int kThreads = 128;

// dst[0, n) = src[0, n); `vector`: both 16-byte aligned and n a multiple of 16 bytes.
template <typename T>
__device__ void CopySpan(const T* __restrict__ src, T* __restrict__ dst, int n, bool vector) {
  if (vector) {
    const int chunks = n * static_cast<int>(sizeof(T)) / 16;
    const auto* from = reinterpret_cast<const uint4*>(src);
    auto* to = reinterpret_cast<uint4*>(dst);
    for (int i = threadIdx.x; i < chunks; i += blockDim.x) {
      StoreVec(to + i, LoadVec<uint4>(from + i));
    }
  } else {
    for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
  }
}

// grid: num_tokens. qkv: [num_tokens, row_stride]; caches: [num_slots, k_width / v_width].
template <typename T>
__global__ void __launch_bounds__(kThreads)
    WriteKvKernel(const T* __restrict__ qkv, int64_t row_stride, int64_t k_col, int64_t v_col,
                  const int64_t* __restrict__ slots, int k_width, int v_width, bool k_vector,
                  bool v_vector, T* __restrict__ k_cache, T* __restrict__ v_cache) {
  const int64_t token = blockIdx.x;
  const int64_t slot = slots[token];
  if (slot < 0) return;  // padding
  const T* row = qkv + token * row_stride;
  CopySpan(row + k_col, k_cache + slot * k_width, k_width, k_vector);
  CopySpan(row + v_col, v_cache + slot * v_width, v_width, v_vector);
}

}  // namespace

template <typename T>
cudaError_t LaunchWriteKv(const T* qkv, int64_t row_stride, int64_t k_col, int64_t v_col,
                          const int64_t* slots, int64_t num_tokens, int num_kv_heads, int head_dim,
                          int v_head_dim, T* k_cache, T* v_cache, cudaStream_t stream) {
  const int64_t k_width = int64_t{num_kv_heads} * head_dim;
  const int64_t v_width = int64_t{num_kv_heads} * v_head_dim;
  if (num_tokens < 0 || num_kv_heads < 1 || head_dim < 1 || v_head_dim < 1 ||
      num_tokens > INT_MAX || k_width > INT_MAX || v_width > INT_MAX || k_col < 0 || v_col < 0 ||
      row_stride < k_col + k_width || row_stride < v_col + v_width) {
    return cudaErrorInvalidValue;
  }
  if (num_tokens == 0) return cudaSuccess;
  if (qkv == nullptr || slots == nullptr || k_cache == nullptr || v_cache == nullptr) {
    return cudaErrorInvalidValue;
  }
  constexpr int64_t kVec = 16 / sizeof(T);
  const bool rows_aligned = Aligned16(qkv) && row_stride % kVec == 0;
  const bool k_vector =
      rows_aligned && Aligned16(k_cache) && k_col % kVec == 0 && k_width % kVec == 0;
  const bool v_vector =
      rows_aligned && Aligned16(v_cache) && v_col % kVec == 0 && v_width % kVec == 0;
  return LaunchKernel(WriteKvKernel<T>, static_cast<unsigned>(num_tokens), kThreads, 0, stream,
                      qkv, row_stride, k_col, v_col, slots, static_cast<int>(k_width),
                      static_cast<int>(v_width), k_vector, v_vector, k_cache, v_cache);
}

template cudaError_t LaunchWriteKv<float>(const float*, int64_t, int64_t, int64_t, const int64_t*,
                                          int64_t, int, int, int, float*, float*, cudaStream_t);
template cudaError_t LaunchWriteKv<__nv_bfloat16>(const __nv_bfloat16*, int64_t, int64_t, int64_t,
                                                  const int64_t*, int64_t, int, int, int,
                                                  __nv_bfloat16*, __nv_bfloat16*, cudaStream_t);

}  // namespace tpserve
