#include "worker/kernels/cpu/bf16_avx2.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "worker/dtype.h"
#include "worker/kernels/cpu/bf16_gemm_testing.h"
#include "worker/kernels/cpu/cpu_threads.h"

namespace tpserve {
namespace bf16_avx2 {
namespace {

struct Case {
  std::vector<uint16_t> w;       // [n_out, k] bf16 bits
  std::vector<float> w_f;        // the same, widened
  std::vector<uint16_t> packed;  // PackBlocked
};

Case MakeWeight(int64_t n_out, int64_t k, uint32_t seed) {
  const std::vector<float> values = RandomNormal(n_out * k, seed);
  Case c;
  c.w.resize(n_out * k);
  c.w_f.resize(n_out * k);
  for (int64_t i = 0; i < n_out * k; ++i) {
    c.w[i] = FloatToBf16(values[i]);
    c.w_f[i] = Bf16ToFloat(c.w[i]);
  }
  c.packed.resize(PackedBytes(n_out, k) / sizeof(uint16_t));
  PackBlocked(c.w.data(), n_out, k, c.packed.data());
  return c;
}

std::vector<float> RoundedRow(const float* x, int64_t k) {
  std::vector<float> r(k);
  for (int64_t i = 0; i < k; ++i) r[i] = Bf16ToFloat(FloatToBf16(x[i]));
  return r;
}

// Every element of y is the reference's exact bits, for every m (decode, pairs and an
// odd row, panels, more than one row group) and both accumulate modes.
void ExpectBitExact(int64_t n_out, int64_t k, const std::vector<int64_t>& ms) {
  const Case c = MakeWeight(n_out, k, static_cast<uint32_t>(n_out * 31 + k));
  for (int64_t m : ms) {
    for (bool accumulate : {false, true}) {
      const std::vector<float> x = RandomNormal(m * k, static_cast<uint32_t>(m));
      std::vector<float> y0 = RandomNormal(m * n_out, 99);
      std::vector<float> y = y0;
      y.push_back(1234.5f);  // a guard past the end
      MatMul(x.data(), m, c.packed.data(), n_out, k, y.data(), accumulate);
      ASSERT_EQ(y.back(), 1234.5f) << "wrote past y";
      for (int64_t i = 0; i < m; ++i) {
        const std::vector<float> xr = RoundedRow(x.data() + i * k, k);
        for (int64_t r = 0; r < n_out; ++r) {
          const float want = ReferenceDot(xr.data(), c.w_f.data() + r * k, k, accumulate,
                                          y0[i * n_out + r]);
          ASSERT_EQ(std::memcmp(&y[i * n_out + r], &want, sizeof(float)), 0)
              << "n_out " << n_out << " k " << k << " m " << m << " acc " << accumulate
              << " row " << i << " col " << r << ": " << y[i * n_out + r] << " vs " << want;
        }
      }
    }
  }
}

TEST(Bf16Avx2Test, TinyOddShapesAreBitExact) {
  for (int64_t n_out : {1, 3, 15, 16, 17, 33}) {
    for (int64_t k : {1, 2, 3, 15, 16, 17}) {
      ExpectBitExact(n_out, k, {1, 2, 3, 4, 5, 6, 7, 8, 9, 11});
    }
  }
}

TEST(Bf16Avx2Test, TilesPrefetchesAndRowGroupsAreBitExact) {
  // 201 output rows are 13 blocks, the last partly padding. Rows of x: 1 (two blocks at a
  // time, the 13th alone), 2 and 3 (a two-block tile only, streaming both blocks; the 13th
  // block alone), 4 (one tile, streaming its block), 7 (5 + 2 over three blocks), 8 (6 + 2
  // over three blocks), 9 (6 + 3 over two), 13 (6, 5, 2 over three), 14 (6, 6, 2 over
  // three), 16 (6, 5, 5), 40 (6s, 5 and 5), 257 (row groups of 129 and 128): from 7 rows
  // every pass asks for its share of the next block, and the run's last block for none.
  // Three-block tiles over 13 blocks end with a group of one block; over 14 (224 rows),
  // with a group of two.
  ExpectBitExact(201, 2048, {1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 14, 16, 40, 257});
  ExpectBitExact(224, 300, {7, 8, 14, 20});
  // k = 5633: odd, so the last column pair is half padding.
  ExpectBitExact(45, 5633, {1, 3, 6, 8, 65});
}

// The reference itself: within fp32 summation error of the exact (double) dot product.
TEST(Bf16Avx2Test, ReferenceIsCloseToExact) {
  const int64_t k = 4099;
  const std::vector<float> x = RoundedRow(RandomNormal(k, 1).data(), k);
  const std::vector<float> w = RoundedRow(RandomNormal(k, 2).data(), k);
  double exact = 0, magnitude = 0;
  for (int64_t i = 0; i < k; ++i) {
    exact += double{x[i]} * w[i];
    magnitude += std::fabs(double{x[i]} * w[i]);
  }
  const float got = ReferenceDot(x.data(), w.data(), k, false, 0.0f);
  EXPECT_NEAR(got, exact, 4 * std::sqrt(double(k)) * std::ldexp(1.0, -24) * magnitude);
  EXPECT_FLOAT_EQ(ReferenceDot(x.data(), w.data(), k, true, 2.0f), got + 2.0f);
}

TEST(Bf16Avx2Test, RowDoesNotDependOnItsBatch) {
  const int64_t n_out = 37, k = 300;
  const Case c = MakeWeight(n_out, k, 5);
  const std::vector<float> x = RandomNormal(70 * k, 6);
  std::vector<float> batch(70 * n_out);
  MatMul(x.data(), 70, c.packed.data(), n_out, k, batch.data(), false);
  for (int64_t i : {0, 1, 2, 3, 41, 69}) {
    std::vector<float> alone(n_out);
    MatMul(x.data() + i * k, 1, c.packed.data(), n_out, k, alone.data(), false);
    EXPECT_EQ(std::memcmp(alone.data(), batch.data() + i * n_out, n_out * sizeof(float)), 0)
        << "row " << i;
  }
}

void ExpectThreadCountChangesNoBits(int64_t n_out, int64_t k, const std::vector<int64_t>& ms) {
  const Case c = MakeWeight(n_out, k, 7);
  const int64_t most = *std::max_element(ms.begin(), ms.end());
  const std::vector<float> x = RandomNormal(most * k, 8);
  for (int64_t m : ms) {
    SetCpuThreads(1);
    std::vector<float> one(m * n_out), many(m * n_out);
    MatMul(x.data(), m, c.packed.data(), n_out, k, one.data(), false);
    for (int threads : {2, 3}) {
      SetCpuThreads(threads);
      MatMul(x.data(), m, c.packed.data(), n_out, k, many.data(), false);
      EXPECT_EQ(std::memcmp(many.data(), one.data(), one.size() * sizeof(float)), 0)
          << "m " << m << ", " << threads << " threads";
    }
  }
  SetCpuThreads(1);
}

// The compute threads split the output blocks into runs (8 blocks each, or fewer where a
// block is long): 2 and 3 threads give 1 thread's bits at batch 1 (blocks in pairs), 3
// (a two-block tile alone), 7 and 8 (5 + 2 and 6 + 2 over three blocks), 9 (6 + 3 over two,
// with the side stream) and 70 (row tiles), over 21 blocks, the multi-block tiles grouped
// within each thread's runs; and 200 rows at k = 5633 (runs of one block, so a
// three-block tile's groups are all short).
TEST(Bf16Avx2Test, ThreadCountChangesNoBits) {
  ExpectThreadCountChangesNoBits(333, 300, {1, 3, 7, 8, 9, 70});
  ExpectThreadCountChangesNoBits(333, 5633, {200});
}

TEST(Bf16Avx2Test, PackingKeepsEveryWeightAndZeroesThePadding) {
  const int64_t n_out = 6, k = 21;
  const Case c = MakeWeight(n_out, k, 7);
  EXPECT_EQ(PackedBytes(n_out, k), size_t{16 * 22 * 2});
  for (int64_t r = 0; r < PaddedRows(n_out); ++r) {
    for (int64_t col = 0; col < PaddedCols(k); ++col) {
      const uint16_t want = r < n_out && col < k ? c.w[r * k + col] : 0;
      EXPECT_EQ(PackedAt(c.packed.data(), k, r, col), want) << r << "," << col;
    }
  }
}

TEST(Bf16Avx2Test, NonFiniteXReachesOnlyItsRow) {
  const int64_t n_out = 9, k = 40;
  const Case c = MakeWeight(n_out, k, 8);
  for (float bad :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    std::vector<float> x = RandomNormal(5 * k, 9);
    x[2 * k + 17] = bad;
    std::vector<float> y(5 * n_out);
    MatMul(x.data(), 5, c.packed.data(), n_out, k, y.data(), false);
    for (int64_t i = 0; i < 5; ++i) {
      for (int64_t r = 0; r < n_out; ++r) {
        if (i == 2) {
          EXPECT_FALSE(std::isfinite(y[i * n_out + r])) << r;
        } else {
          EXPECT_TRUE(std::isfinite(y[i * n_out + r])) << i << "," << r;
        }
      }
    }
  }
}

// x is rounded to bf16 as FloatToBf16 does, ties to even included, in the vector path (8
// columns at a time) and the scalar tail: through an identity weight, y is x rounded.
TEST(Bf16Avx2Test, RoundsXAsFloatToBf16) {
  const int64_t k = 27, m = 7;  // 3 vector steps and a tail of 3; tiles of 4 and 3
  std::vector<uint16_t> identity(k * k, 0);
  for (int64_t i = 0; i < k; ++i) identity[i * k + i] = FloatToBf16(1.0f);
  std::vector<uint16_t> packed(PackedBytes(k, k) / sizeof(uint16_t));
  PackBlocked(identity.data(), k, k, packed.data());
  const uint32_t bits[] = {
      0x3F808000u,  // a tie, the kept half even: down
      0x3F818000u,  // a tie, the kept half odd: up
      0xBF808000u, 0xBF818000u, 0x3F80FFFFu, 0x3F807FFFu,
      0x7F7F7FFFu,  // the largest that stays finite
      0x00008000u, 0x00018000u, 0x80018000u,  // subnormal ties
      0x00000000u, 0x80000000u, 0x4049FFFFu, 0xC2F6E979u};
  std::vector<float> x(m * k);
  for (size_t i = 0; i < x.size(); ++i) {
    const uint32_t b = bits[i % (sizeof(bits) / sizeof(bits[0]))] ^ (i / 14 % 2 ? 1u << 20 : 0);
    std::memcpy(&x[i], &b, sizeof(b));
  }
  std::vector<float> y(m * k);
  MatMul(x.data(), m, packed.data(), k, k, y.data(), false);
  for (int64_t i = 0; i < m * k; ++i) {
    const float want = Bf16ToFloat(FloatToBf16(x[i]));
    EXPECT_EQ(y[i], want) << "element " << i << ": " << x[i];
    EXPECT_EQ(std::signbit(y[i]), std::signbit(want) && want != 0.0f) << i;  // -0 + 0 is +0
  }
}

// A tile's layout, and nothing written outside it: MatMul's threads prepare neighbouring
// tiles at once, so a store past a tile's end would race with the next tile's own.
TEST(Bf16Avx2Test, PrepareTileWritesItsTileOnly) {
  constexpr float kGuard = -7.25f;
  for (int n = 1; n <= 6; ++n) {
    for (int64_t k : {1, 7, 8, 9, 15, 16, 17, 24, 31, 33, 300}) {
      const std::vector<float> x = RandomNormal(n * k, static_cast<uint32_t>(n * 1000 + k));
      const int64_t size = PaddedCols(k) * n, guard = 16;
      std::vector<float> buffer(size + 2 * guard, kGuard);
      PrepareTile(x.data(), k, n, buffer.data() + guard);
      for (int64_t j = 0; j < guard; ++j) {
        ASSERT_EQ(buffer[j], kGuard) << "n " << n << " k " << k << ": before, " << j;
        ASSERT_EQ(buffer[guard + size + j], kGuard) << "n " << n << " k " << k << ": after";
      }
      for (int i = 0; i < n; ++i) {
        const std::vector<float> row = RoundedRow(x.data() + i * k, k);
        for (int64_t c = 0; c < PaddedCols(k); ++c) {
          const float want = c < k ? row[c] : 0.0f;
          ASSERT_EQ(buffer[guard + c * n + i], want) << "n " << n << " k " << k << " c " << c;
        }
      }
    }
  }
}

// The benchmark's passes: each kind the tile plans use runs; any other shape is refused.
TEST(Bf16Avx2Test, CachedPassFlopsRunsThePlansPassesOnly) {
  for (int rows = 1; rows <= 6; ++rows) EXPECT_GT(CachedPassFlops(rows, 1, 33, 2), 0) << rows;
  for (int rows = 1; rows <= 3; ++rows) EXPECT_GT(CachedPassFlops(rows, 2, 33, 2), 0) << rows;
  EXPECT_GT(CachedPassFlops(2, 3, 33, 2), 0);
  EXPECT_EQ(CachedPassFlops(7, 1, 33, 2), 0);
  EXPECT_EQ(CachedPassFlops(4, 2, 33, 2), 0);
  EXPECT_EQ(CachedPassFlops(3, 3, 33, 2), 0);
  EXPECT_EQ(CachedPassFlops(2, 4, 33, 2), 0);
  EXPECT_EQ(CachedPassFlops(0, 1, 33, 2), 0);
  EXPECT_EQ(CachedPassFlops(2, 1, 0, 2), 0);
  EXPECT_EQ(CachedPassFlops(2, 1, 33, 0), 0);
}

TEST(Bf16Avx2Test, ZeroRowsIsANoOp) {
  const Case c = MakeWeight(16, 16, 10);
  float y = 3.0f;
  MatMul(nullptr, 0, c.packed.data(), 16, 16, &y, false);
  EXPECT_EQ(y, 3.0f);
}

}  // namespace
}  // namespace bf16_avx2
}  // namespace tpserve
