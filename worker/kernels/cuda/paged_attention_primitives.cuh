// Device primitives of the paged-attention kernels (paged_attention_tile.cuh), beside the
// shared ones of vec.cuh (T <-> fp32): vector loads from shared memory, cache rows staged into shared memory through cp.async,
// warp reductions. Included only through paged_attention_tile.cuh.
#ifndef TPSERVE_WORKER_KERNELS_CUDA_PAGED_ATTENTION_PRIMITIVES_CUH_
#define TPSERVE_WORKER_KERNELS_CUDA_PAGED_ATTENTION_PRIMITIVES_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <type_traits>

#include "worker/kernels/cuda/vec.cuh"

namespace tpserve {
namespace attention {

constexpr int kThreads = 128;  // per CTA
constexpr int kWarps = kThreads / 32;

__host__ __device__ constexpr int RoundUp(int x, int m) { return (x + m - 1) / m * m; }

// f[0, N) = p[0, N), p aligned to N·sizeof(T) (16 bytes at most).
template <typename T, int N>
__device__ __forceinline__ void LoadFloats(const T* p, float* f) {
  if constexpr (std::is_same_v<T, float>) {
    if constexpr (N % 4 == 0) {
#pragma unroll
      for (int i = 0; i < N; i += 4) {
        const float4 v = LoadVec<float4>(p + i);
        f[i] = v.x, f[i + 1] = v.y, f[i + 2] = v.z, f[i + 3] = v.w;
      }
    } else if constexpr (N == 2) {
      const float2 v = LoadVec<float2>(p);
      f[0] = v.x, f[1] = v.y;
    } else {
      f[0] = p[0];
    }
  } else if constexpr (N == 1) {
    f[0] = ToFloat(p[0]);
  } else {
    static_assert(N % 2 == 0);
    // bf16 pairs, in one load of min(2N, 16) bytes at a time.
    constexpr int kPairsPerLoad = N >= 8 ? 4 : N / 2;
    using Load = std::conditional_t<kPairsPerLoad == 4, uint4,
                                    std::conditional_t<kPairsPerLoad == 2, uint2, unsigned>>;
#pragma unroll
    for (int i = 0; i < N; i += 2 * kPairsPerLoad) {
      const Load raw = LoadVec<Load>(p + i);
      const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
      for (int j = 0; j < kPairsPerLoad; ++j) {
        const float2 v = __bfloat1622float2(pairs[j]);
        f[i + 2 * j] = v.x, f[i + 2 * j + 1] = v.y;
      }
    }
  }
}

// 16 bytes global → shared, asynchronous; zeros without reading when !valid.
__device__ __forceinline__ void CopyChunkAsync(void* smem, const void* global, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(global),
               "r"(valid ? 16 : 0)
               : "memory");
#elif defined(TPSERVE_CUDA_EMULATOR)
  emu::CopyAsync16(smem, global, valid);
#else
  *static_cast<uint4*>(smem) = valid ? *static_cast<const uint4*>(global) : make_uint4(0, 0, 0, 0);
#endif
}

__device__ __forceinline__ void CommitCopies() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#elif defined(TPSERVE_CUDA_EMULATOR)
  emu::CommitCopies();
#endif
}

// Waits until at most kPending of this thread's committed copy groups are in flight.
template <int kPending>
__device__ __forceinline__ void WaitCopies() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
#elif defined(TPSERVE_CUDA_EMULATOR)
  emu::WaitCopies(kPending);
#endif
}

__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int m = 16; m > 0; m /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, m));
  return v;
}

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int m = 16; m > 0; m /= 2) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}

// Stages kKeys rows of one kv head into s_rows [kKeys, smem_stride]: row j from cache slot
// s_slot[j] (< 0: zeros), `chunks` 16-byte chunks of it, elements past `width` zero.
template <typename T, int kKeys>
__device__ __forceinline__ void StageRows(const T* __restrict__ cache, int64_t slot_stride,
                                          int64_t head_offset, int width, int chunks,
                                          int smem_stride, const int64_t* s_slot, bool vector,
                                          T* s_rows) {
  constexpr int kVec = 16 / sizeof(T);
  if (vector) {
    for (int i = threadIdx.x; i < kKeys * chunks; i += kThreads) {
      const int row = i / chunks, c = i - row * chunks;
      const int64_t slot = s_slot[row];
      const bool valid = slot >= 0 && c * kVec < width;
      const T* src = valid ? cache + slot * slot_stride + head_offset + c * kVec : cache;
      CopyChunkAsync(s_rows + row * smem_stride + c * kVec, src, valid);
    }
  } else {
    const int row_elems = chunks * kVec;
    for (int i = threadIdx.x; i < kKeys * row_elems; i += kThreads) {
      const int row = i / row_elems, col = i - row * row_elems;
      const int64_t slot = s_slot[row];
      s_rows[row * smem_stride + col] =
          slot >= 0 && col < width ? cache[slot * slot_stride + head_offset + col] : FromFloat<T>(0);
    }
  }
}

}  // namespace attention
}  // namespace tpserve

#endif  // TPSERVE_WORKER_KERNELS_CUDA_PAGED_ATTENTION_PRIMITIVES_CUH_
