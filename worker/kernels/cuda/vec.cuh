// Device helpers shared by the CUDA kernels (textual header, .cu files only): element
// conversion between T (float or __nv_bfloat16) and fp32, 16-byte chunks for wide loads
// and stores, a warp-wide sum, and the declaration of dynamic shared memory that also
// compiles on the CPU emulator (emu/emu.h).
#ifndef TPSERVE_WORKER_KERNELS_CUDA_VEC_CUH_
#define TPSERVE_WORKER_KERNELS_CUDA_VEC_CUH_

#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#if defined(TPSERVE_CUDA_EMULATOR)
#include "testing/cuda_emu/emu.h"
#endif

// Declares `name`, the CTA's dynamic shared memory as unsigned char, 16-byte aligned: the
// `extern __shared__` array on a device, the emulator's buffer for the running CTA.
#if defined(TPSERVE_CUDA_EMULATOR)
#define TPSERVE_DYNAMIC_SMEM(name) unsigned char* const name = ::tpserve::emu::DynamicSmem()
#else
#define TPSERVE_DYNAMIC_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
#endif

// Follows every static __shared__ declaration: on the emulator, poisons the variable for
// each CTA (emu.h), so that a read before any write shows; nothing on a device.
#if defined(TPSERVE_CUDA_EMULATOR)
#define TPSERVE_SHARED_POISON(var) ::tpserve::emu::PoisonStaticShared(&(var), sizeof(var))
#else
#define TPSERVE_SHARED_POISON(var) static_cast<void>(0)
#endif

namespace tpserve {

// Elements of T in 16 bytes: the widest load.
template <typename T>
constexpr int kVec = 16 / sizeof(T);

// N consecutive T, moved with one load or store (two for 32 bytes).
template <typename T, int N>
struct alignas(N * sizeof(T) < 16 ? N * sizeof(T) : 16) Chunk {
  T v[N];
};

// *p as one V (a Chunk, uint4, float4, ...): p must be aligned to alignof(V), or a device
// faults with a misaligned address, which ends the context. The emulator checks it.
template <typename V>
__device__ __forceinline__ V LoadVec(const void* p) {
#if defined(TPSERVE_CUDA_EMULATOR)
  ::tpserve::emu::CheckAligned(p, alignof(V), "load");
#endif
  return *static_cast<const V*>(p);
}

template <typename V>
__device__ __forceinline__ void StoreVec(void* p, const V& v) {
#if defined(TPSERVE_CUDA_EMULATOR)
  ::tpserve::emu::CheckAligned(p, alignof(V), "store");
#endif
  *static_cast<V*>(p) = v;
}

template <typename T>
__device__ __forceinline__ float ToFloat(T v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return __bfloat162float(v);
  }
}

template <typename T>
__device__ __forceinline__ T FromFloat(float v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return __float2bfloat16_rn(v);
  }
}

// N elements at p (aligned to the chunk) as fp32.
template <typename T, int N>
__device__ __forceinline__ void Load(const T* p, float (&f)[N]) {
  const Chunk<T, N> c = LoadVec<Chunk<T, N>>(p);
#pragma unroll
  for (int k = 0; k < N; ++k) f[k] = ToFloat(c.v[k]);
}

// N fp32 values rounded to T and stored at p (aligned to the chunk).
template <typename T, int N>
__device__ __forceinline__ void Store(T* p, const float (&f)[N]) {
  Chunk<T, N> c;
#pragma unroll
  for (int k = 0; k < N; ++k) c.v[k] = FromFloat<T>(f[k]);
  StoreVec(p, c);
}

// The sum of v over the 32 lanes of a full warp, returned to every lane.
__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// p is a multiple of `bytes` (a power of two).
inline bool Aligned(const void* p, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}
inline bool Aligned16(const void* p) { return Aligned(p, 16); }

}  // namespace tpserve

#endif  // TPSERVE_WORKER_KERNELS_CUDA_VEC_CUH_
