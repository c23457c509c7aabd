// A 16 x 16 transpose of 32-bit lanes in AVX-512 registers: what turns rows of bf16 pairs
// into the column-pair lines of the packed layouts (bf16_amx::PackLayout) and a block of
// keys into AMX tiles (attention_amx). Callers need AVX512F.
#ifndef TPSERVE_WORKER_KERNELS_CPU_TRANSPOSE_AVX512_H_
#define TPSERVE_WORKER_KERNELS_CPU_TRANSPOSE_AVX512_H_

#include <immintrin.h>

namespace tpserve {

// out[c] = column c of the 16 x 16 matrix of 32-bit lanes whose rows are `in`.
__attribute__((target("avx512f"))) inline void Transpose16(const __m512i in[16],
                                                           __m512i out[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(in[2 * i], in[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(in[2 * i], in[2 * i + 1]);
  }
  // u[4g + c], rows 4g..4g+3: 128-bit lane L holds their column 4L + c.
  for (int g = 0; g < 4; ++g) {
    u[4 * g] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
    u[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
  }
  for (int c = 0; c < 4; ++c) {
    const __m512i v01 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x88);  // lanes 0, 2
    const __m512i w01 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xdd);  // lanes 1, 3
    const __m512i v23 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x88);
    const __m512i w23 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xdd);
    out[c] = _mm512_shuffle_i32x4(v01, v23, 0x88);       // column c
    out[8 + c] = _mm512_shuffle_i32x4(v01, v23, 0xdd);   // column 8 + c
    out[4 + c] = _mm512_shuffle_i32x4(w01, w23, 0x88);   // column 4 + c
    out[12 + c] = _mm512_shuffle_i32x4(w01, w23, 0xdd);  // column 12 + c
  }
}

}  // namespace tpserve

#endif  // TPSERVE_WORKER_KERNELS_CPU_TRANSPOSE_AVX512_H_
