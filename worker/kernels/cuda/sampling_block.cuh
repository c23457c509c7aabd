// Device building blocks of the sampling kernels (sampling.cu): one CTA of kThreads
// threads owns one row. Row loops, block reductions, the order-preserving keys and the
// fixed-point weights. Every function here is called by all threads of the CTA with the
// same arguments (block-uniform), and every result is the same in all of them.
#ifndef TPSERVE_WORKER_KERNELS_CUDA_SAMPLING_BLOCK_CUH_
#define TPSERVE_WORKER_KERNELS_CUDA_SAMPLING_BLOCK_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "worker/kernels/cuda/vec.cuh"

namespace tpserve {
namespace sampling {

using u64 = unsigned long long;

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr unsigned kFullMask = 0xffffffffu;

// ---- Keys and weights. --------------------------------------------------------------

// The CPU compares logits as floats, where −0 == +0: give both the key of +0.
__device__ __forceinline__ float CanonicalZero(float x) { return x == 0.0f ? 0.0f : x; }

// Larger logit, larger key (floats as sign-magnitude bits, flipped into unsigned order).
__device__ __forceinline__ uint32_t LogitKey(float x) {
  const uint32_t b = __float_as_uint(CanonicalZero(x));
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ __forceinline__ float LogitOfKey(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// Steps 3's weight exp((l − max) · scale) ∈ [0, 1], rounded as the CPU rounds its
// argument; the explicit _rn operations keep every pass computing the same bits.
__device__ __forceinline__ float Weight(float logit, float max, float scale) {
  return expf(__fmul_rn(__fsub_rn(logit, max), scale));
}

// Weights as integers of 2^-43: Σ over ≤ 2^20 of them fits 64 bits, and integer sums are
// exact, so every pass and every order of summation agrees on a cumulative mass.
constexpr float kFixedOne = 0x1p43f;
__device__ __forceinline__ u64 Fixed(float w) { return __float2ull_rn(w * kFixedOne); }

// Max-reduce key of (logit, id): the larger logit, then the lower id.
__device__ __forceinline__ u64 ArgmaxKey(float logit, int32_t id) {
  return (u64{LogitKey(logit)} << 32) | (0xffffffffu - static_cast<uint32_t>(id));
}
__device__ __forceinline__ int32_t ArgmaxId(u64 key) {
  return static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(key));
}
__device__ __forceinline__ float ArgmaxLogit(u64 key) {
  return LogitOfKey(static_cast<uint32_t>(key >> 32));
}

// ---- Reductions. ----------------------------------------------------------------------

struct Sum {
  template <typename T>
  __device__ T operator()(T a, T b) const { return a + b; }
};
struct Max {
  template <typename T>
  __device__ T operator()(T a, T b) const { return a > b ? a : b; }
};

template <typename T, typename Op>
__device__ __forceinline__ T WarpReduce(T v, Op op) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    v = op(v, __shfl_xor_sync(kFullMask, v, offset));
  }
  return v;
}

// Every thread gets op over all threads' v, combined in one fixed order (deterministic
// for doubles too).
template <typename T, typename Op>
__device__ T BlockReduce(T v, Op op) {
  __shared__ T partial[kWarps];
  TPSERVE_SHARED_POISON(partial);
  v = WarpReduce(v, op);
  __syncthreads();  // an earlier call's readers are done with `partial`
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  v = partial[0];
  for (int w = 1; w < kWarps; ++w) v = op(v, partial[w]);
  return v;
}

// Inclusive prefix sum over the lanes of a warp.
template <typename T>
__device__ __forceinline__ T WarpInclusiveSum(T v) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const T up = __shfl_up_sync(kFullMask, v, offset);
    if (lane >= offset) v += up;
  }
  return v;
}

// ---- Row loops. -----------------------------------------------------------------------

// f(i, row[i]) for i in [0, n), block-strided with kUnroll loads in flight per thread;
// each thread visits its ids in increasing order.
template <typename F>
__device__ __forceinline__ void ForEachLogit(const float* row, int n, F&& f) {
  constexpr int kUnroll = 4;
  int i = threadIdx.x;
  for (; i + (kUnroll - 1) * kThreads < n; i += kUnroll * kThreads) {
    float v[kUnroll];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) v[k] = row[i + k * kThreads];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) f(i + k * kThreads, v[k]);
  }
  for (; i < n; i += kThreads) f(i, row[i]);
}

// The contiguous ids [begin, end) that warp `warp` owns when a row is split among the
// kWarps warps in id order.
struct Segment {
  int begin;
  int end;
};
__device__ __forceinline__ Segment WarpSegment(int n, int warp) {
  const int per = (n + kWarps - 1) / kWarps;
  const int begin = min(n, warp * per);
  return {begin, min(n, begin + per)};
}

// f(i, row[i]) for this lane's ids of the segment, lane-strided, kUnroll loads in flight.
template <typename F>
__device__ __forceinline__ void ForEachInSegment(const float* row, Segment s, F&& f) {
  constexpr int kUnroll = 4;
  int i = s.begin + static_cast<int>(threadIdx.x % 32);
  for (; i + (kUnroll - 1) * 32 < s.end; i += kUnroll * 32) {
    float v[kUnroll];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) v[k] = row[i + k * 32];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) f(i + k * 32, v[k]);
  }
  for (; i < s.end; i += 32) f(i, row[i]);
}

}  // namespace sampling
}  // namespace tpserve

#endif  // TPSERVE_WORKER_KERNELS_CUDA_SAMPLING_BLOCK_CUH_
