#include "worker/kernels/cpu/int8_avx512.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

constexpr int64_t kB = int8_avx512::kBlockOutputs;

// A weight written through Offset, and x, both random over their whole ranges.
struct Operands {
  int64_t n_pad, k_pad, m;
  std::vector<int8_t> w;    // the packed layout
  std::vector<int16_t> x;   // [m, k_pad]
  std::vector<int8_t> rows;  // [n_pad, k_pad], the same weight row-major
};

Operands Random(int64_t blocks, int64_t k_pad, int64_t m, uint32_t seed) {
  Operands o{blocks * kB, k_pad, m, {}, {}, {}};
  std::mt19937 rng(seed);
  o.w.assign(o.n_pad * k_pad, 0);
  o.rows.assign(o.n_pad * k_pad, 0);
  for (int64_t r = 0; r < o.n_pad; ++r) {
    for (int64_t c = 0; c < k_pad; ++c) {
      const int8_t v = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
      o.rows[r * k_pad + c] = v;
      o.w[int8_avx512::Offset(r, c, k_pad)] = v;
    }
  }
  o.x.resize(m * k_pad);
  for (int16_t& v : o.x) v = static_cast<int16_t>(static_cast<int>(rng() % 65535) - 32767);
  return o;
}

// [m, n_pad] sums from the kernel under `plan`, each pass's sums put in place.
std::vector<float> Sums(const Operands& o, int8_avx512::Plan plan, int64_t block_begin,
                        int64_t block_end) {
  std::vector<float> y(o.m * o.n_pad, -1.0f);
  int8_avx512::MatMulBlocksIn(
      plan, o.x.data(), o.m, o.k_pad, o.w.data(), block_begin, block_end,
      [&](int64_t block, int64_t row0, int rows, const float* sums) {
        for (int i = 0; i < rows; ++i) {
          for (int64_t j = 0; j < kB; ++j) {
            y[(row0 + i) * o.n_pad + block * kB + j] = sums[i * kB + j];
          }
        }
      });
  return y;
}

// The layout as int8_avx512.h describes it: block, then column pair, then output, then
// the pair's two columns.
TEST(Int8Avx512Test, OffsetIsTheDocumentedLayout) {
  const int64_t k_pad = 64;
  int64_t expected = 0;
  for (int64_t block = 0; block < 2; ++block) {
    for (int64_t pair = 0; pair < k_pad / 2; ++pair) {
      for (int64_t o = 0; o < kB; ++o) {
        for (int64_t c = 0; c < 2; ++c) {
          ASSERT_EQ(int8_avx512::Offset(block * kB + o, 2 * pair + c, k_pad), expected++);
        }
      }
    }
  }
}

// Exact integer sums per 512-column chunk, to fp32 once, chunks added in order from 0,
// for 1-20 rows (one pass to three) and whichever passes ask ahead: bit for bit.
TEST(Int8Avx512Test, SumsAreTheChunksExactIntegerSumsWhateverThePlan) {
  if (!int8_avx512::Available()) GTEST_SKIP() << "no AVX512-VNNI on this CPU";
  const int64_t k_pad = 1088;  // two whole chunks and a partial one
  for (int64_t m : {1, 5, 6, 7, 8, 9, 16, 20}) {
    const Operands o = Random(3, k_pad, m, static_cast<uint32_t>(m));
    const std::vector<float> y = Sums(o, int8_avx512::Plan(), 0, 3);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t n = 0; n < o.n_pad; ++n) {
        float want = 0.0f;
        for (int64_t c0 = 0; c0 < k_pad; c0 += int8_avx512::kChunkCols) {
          int64_t sum = 0;
          for (int64_t c = c0; c < std::min(k_pad, c0 + int8_avx512::kChunkCols); ++c) {
            sum += int64_t{o.x[i * k_pad + c]} * o.rows[n * k_pad + c];
          }
          ASSERT_LT(std::abs(sum), int64_t{1} << 31);
          want += static_cast<float>(sum);
        }
        ASSERT_EQ(y[i * o.n_pad + n], want) << "m " << m << " row " << i << " output " << n;
      }
    }
    for (int ahead : {1, 7, 99}) {
      EXPECT_EQ(Sums(o, int8_avx512::Plan{ahead}, 0, 3), y) << "m " << m << " ahead " << ahead;
    }
    // A run of blocks gives those blocks' sums and touches no others.
    const std::vector<float> part = Sums(o, int8_avx512::Plan(), 1, 2);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t n = 0; n < o.n_pad; ++n) {
        const float want = n / kB == 1 ? y[i * o.n_pad + n] : -1.0f;
        ASSERT_EQ(part[i * o.n_pad + n], want) << "m " << m << " output " << n;
      }
    }
  }
}

// The largest products over many chunks: every chunk's sum at its bound, no overflow.
TEST(Int8Avx512Test, ChunksAtTheirBoundDoNotOverflow) {
  if (!int8_avx512::Available()) GTEST_SKIP() << "no AVX512-VNNI on this CPU";
  const int64_t k_pad = 4 * int8_avx512::kChunkCols;
  Operands o = Random(1, k_pad, 1, 3);
  for (int64_t r = 0; r < kB; ++r) {
    for (int64_t c = 0; c < k_pad; ++c) {
      const int8_t v = r % 2 == 0 ? int8_t{127} : int8_t{-127};
      o.w[int8_avx512::Offset(r, c, k_pad)] = v;
    }
  }
  for (int16_t& v : o.x) v = -32767;
  const std::vector<float> y = Sums(o, int8_avx512::Plan(), 0, 1);
  const float chunk = static_cast<float>(int64_t{32767} * 127 * int8_avx512::kChunkCols);
  EXPECT_EQ(y[0], -4 * chunk);
  EXPECT_EQ(y[1], 4 * chunk);
}

}  // namespace
}  // namespace tpserve
