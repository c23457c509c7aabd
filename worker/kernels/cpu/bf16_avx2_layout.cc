#include "worker/kernels/cpu/bf16_avx2.h"

#include <immintrin.h>

#include <cstring>

#include "worker/dtype.h"

// The AVX2 kernel's data layouts (bf16_avx2.h): the weight packed in blocks of 16 output
// rows, and x rounded to bf16 and laid out tile by tile. The kernels are in bf16_avx2.cc.

namespace tpserve {
namespace bf16_avx2 {
namespace {

// 8 floats rounded to bf16 (nearest even; a NaN stays a NaN, made quiet), as fp32: the
// vector form of Bf16ToFloat(FloatToBf16(f)).
inline __m256 RoundToBf16(__m256 f) {
  const __m256i bits = _mm256_castps_si256(f);
  const __m256i high = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_add_epi32(
      bits, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), lsb));
  const __m256i quiet = _mm256_or_si256(bits, _mm256_set1_epi32(0x00400000));
  const __m256 nan = _mm256_cmp_ps(f, f, _CMP_UNORD_Q);
  return _mm256_castsi256_ps(_mm256_and_si256(
      _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(rounded),
                                           _mm256_castsi256_ps(quiet), nan)),
      high));
}

// v[0..7] (8 rows of 8) -> v[c] = column c of the rows.
inline void Transpose8x8(__m256 v[8]) {
  __m256 lo[4], hi[4], q[8];
  for (int i = 0; i < 4; ++i) {
    lo[i] = _mm256_unpacklo_ps(v[2 * i], v[2 * i + 1]);  // a0 b0 a1 b1 | a4 b4 a5 b5
    hi[i] = _mm256_unpackhi_ps(v[2 * i], v[2 * i + 1]);  // a2 b2 a3 b3 | a6 b6 a7 b7
  }
  for (int i = 0; i < 2; ++i) {
    q[4 * i] = _mm256_shuffle_ps(lo[2 * i], lo[2 * i + 1], 0x44);      // column 0 | 4
    q[4 * i + 1] = _mm256_shuffle_ps(lo[2 * i], lo[2 * i + 1], 0xEE);  // column 1 | 5
    q[4 * i + 2] = _mm256_shuffle_ps(hi[2 * i], hi[2 * i + 1], 0x44);  // column 2 | 6
    q[4 * i + 3] = _mm256_shuffle_ps(hi[2 * i], hi[2 * i + 1], 0xEE);  // column 3 | 7
  }
  for (int c = 0; c < 4; ++c) {
    v[c] = _mm256_permute2f128_ps(q[c], q[c + 4], 0x20);
    v[c + 4] = _mm256_permute2f128_ps(q[c], q[c + 4], 0x31);
  }
}

int64_t Offset(int64_t row, int64_t col, int64_t k_pad) {
  return (row / kRowsPerBlock) * kRowsPerBlock * k_pad + (col / 2) * kPairElems +
         (row % kRowsPerBlock) * 2 + col % 2;
}

}  // namespace

int64_t PaddedRows(int64_t n_out) {
  return (n_out + kRowsPerBlock - 1) / kRowsPerBlock * kRowsPerBlock;
}
int64_t PaddedCols(int64_t k) { return (k + 1) / 2 * 2; }

// 8 columns at a time: the tile's rows (up to 8) rounded in vectors and transposed, each
// column then written with one store of 8, whose lanes past n the next columns' stores
// overwrite. The last 8 columns' stores are masked to n lanes, so nothing is written past
// the tile (the next tile may be another thread's). A store a float had taken about 4%
// of a 512-row GEMM's profile samples.
void PrepareTile(const float* x, int64_t k, int n, float* out) {
  static_assert(kTileRows <= 8);
  const int64_t k_pad = PaddedCols(k);
  const __m256i row_lanes =
      _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  int64_t c0 = 0;
  if (n == 1) {  // a row is its own layout (decode at batch 1): no transpose
    for (; c0 + 8 <= k; c0 += 8) {
      _mm256_storeu_ps(out + c0, RoundToBf16(_mm256_loadu_ps(x + c0)));
    }
  }
  for (; c0 + 8 <= k; c0 += 8) {
    __m256 v[8];
    for (int i = 0; i < 8; ++i) {
      v[i] = i < n ? RoundToBf16(_mm256_loadu_ps(x + i * k + c0)) : _mm256_setzero_ps();
    }
    Transpose8x8(v);
    float* columns = out + c0 * n;
    if (c0 + 16 <= k) {  // the store past column 7's n lanes lands in the next 8's
      for (int c = 0; c < 8; ++c) _mm256_storeu_ps(columns + c * n, v[c]);
    } else {
      for (int c = 0; c < 8; ++c) _mm256_maskstore_ps(columns + c * n, row_lanes, v[c]);
    }
  }
  for (int64_t c = c0; c < k_pad; ++c) {
    for (int i = 0; i < n; ++i) {
      out[c * n + i] = c < k ? Bf16ToFloat(FloatToBf16(x[i * k + c])) : 0.0f;
    }
  }
}

size_t PackedBytes(int64_t n_out, int64_t k) {
  return static_cast<size_t>(PaddedRows(n_out)) * static_cast<size_t>(PaddedCols(k)) *
         sizeof(uint16_t);
}

void PackBlocked(const uint16_t* w, int64_t n_out, int64_t k, uint16_t* out) {
  const int64_t k_pad = PaddedCols(k);
  std::memset(out, 0, PackedBytes(n_out, k));
  for (int64_t row = 0; row < n_out; ++row) {
    uint16_t* dst = out + Offset(row, 0, k_pad);  // column c at dst + (c / 2)·64 + c % 2
    const uint16_t* src = w + row * k;
    for (int64_t c = 0; c < k; ++c) dst[(c >> 1) * kPairElems + (c & 1)] = src[c];
  }
}

uint16_t PackedAt(const uint16_t* packed, int64_t k, int64_t row, int64_t col) {
  return packed[Offset(row, col, PaddedCols(k))];
}

}  // namespace bf16_avx2
}  // namespace tpserve
