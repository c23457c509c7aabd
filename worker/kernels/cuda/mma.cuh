// Warp-level tensor-core MMA: D[16×8] += A[16×16] · B[16×8], bf16 inputs, fp32
// accumulators (PTX mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32). Textual header
// for .cu files.
//
// Fragments, for lane l of the warp, g = l / 4 ("group") and t = l % 4; each 32-bit word
// holds two bf16 of consecutive k, the lower k in the low half:
//   A (row-major 16×16): a[r] = A[g + 8·(r % 2)][2t + 8·(r / 2) + {0, 1}],   r < 4
//   B (k-major 16×8):    b[r] = B[2t + 8·r + {0, 1}][g],                     r < 2
//   C, D (16×8 fp32):    c[r] = C[g + 8·(r / 2)][2t + r % 2],                r < 4
// The C fragments of two adjacent 16×8 products (columns 0–7 and 8–15) are, packed to
// bf16, exactly the A fragment of their 16×16 concatenation: PackA below.
//
// Before sm_80 (and in host passes) the product is computed from the same fragments by
// warp shuffles, so the layout above is the only contract either path relies on.
#ifndef TPSERVE_WORKER_KERNELS_CUDA_MMA_CUH_
#define TPSERVE_WORKER_KERNELS_CUDA_MMA_CUH_

#include <cuda_bf16.h>

#include <cstdint>

namespace tpserve {
namespace mma {

// Two floats as one word of bf16 (lo in the low half), rounded to nearest.
__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

__device__ __forceinline__ float2 UnpackBf16(uint32_t w) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w));
}

// Two bf16 at different addresses as one word (lo in the low half).
__device__ __forceinline__ uint32_t JoinBf16(const __nv_bfloat16& lo, const __nv_bfloat16& hi) {
  return uint32_t{*reinterpret_cast<const uint16_t*>(&lo)} |
         uint32_t{*reinterpret_cast<const uint16_t*>(&hi)} << 16;
}

// A fragment of the 16×16 block formed by C fragments c_left (columns 0–7) and c_right
// (columns 8–15).
__device__ __forceinline__ void PackA(const float (&c_left)[4], const float (&c_right)[4],
                                      uint32_t (&a)[4]) {
  a[0] = PackBf16(c_left[0], c_left[1]);
  a[1] = PackBf16(c_left[2], c_left[3]);
  a[2] = PackBf16(c_right[0], c_right[1]);
  a[3] = PackBf16(c_right[2], c_right[3]);
}

// d += a · b, every lane of the warp taking part.
__device__ __forceinline__ void MmaBf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                        uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  // Lane (g, t) owns D rows g, g + 8 and columns 2t, 2t + 1. For word w of k (k = 2w,
  // 2w + 1), row g's A word sits in lane 4g + w % 4, register (row half) + 2·(w / 4);
  // column n's B word in lane 4n + w % 4, register w / 4.
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const uint32_t b[2] = {b0, b1};
#pragma unroll
  for (int w = 0; w < 8; ++w) {
    const int hi = w / 4;
    const float2 a_top = UnpackBf16(__shfl_sync(0xffffffffu, a[2 * hi], 4 * g + w % 4));
    const float2 a_bottom = UnpackBf16(__shfl_sync(0xffffffffu, a[2 * hi + 1], 4 * g + w % 4));
    const float2 b_even = UnpackBf16(__shfl_sync(0xffffffffu, b[hi], 4 * (2 * t) + w % 4));
    const float2 b_odd = UnpackBf16(__shfl_sync(0xffffffffu, b[hi], 4 * (2 * t + 1) + w % 4));
    d[0] += a_top.x * b_even.x + a_top.y * b_even.y;
    d[1] += a_top.x * b_odd.x + a_top.y * b_odd.y;
    d[2] += a_bottom.x * b_even.x + a_bottom.y * b_even.y;
    d[3] += a_bottom.x * b_odd.x + a_bottom.y * b_odd.y;
  }
#endif
}

}  // namespace mma
}  // namespace tpserve

#endif  // TPSERVE_WORKER_KERNELS_CUDA_MMA_CUH_
