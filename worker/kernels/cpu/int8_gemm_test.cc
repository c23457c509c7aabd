#include "worker/kernels/cpu/int8_gemm.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "worker/dtype.h"
#include "worker/kernels/cpu/bf16_gemm_testing.h"
#include "worker/kernels/cpu/cpu_threads.h"
#include "worker/kernels/cpu/pack_weight.h"

namespace tpserve {
namespace {

// The values the weight holds, q·scale, [n_out, k].
std::vector<float> Dequantized(const Int8Weight& w) {
  std::vector<float> v(static_cast<size_t>(w.n_out() * w.k()));
  for (int64_t r = 0; r < w.n_out(); ++r) {
    for (int64_t c = 0; c < w.k(); ++c) v[r * w.k() + c] = w.q(r, c) * w.scale(r);
  }
  return v;
}

// The x values MatMulInt8 multiplies by: int16 · 2^e per row.
void RoundXToInt16(const float* x, int64_t k, float* held) {
  std::vector<int16_t> q(static_cast<size_t>(k));
  const float scale = QuantizeRowToInt16(x, k, q.data());
  for (int64_t c = 0; c < k; ++c) held[c] = q[c] * scale;
}

Int8Weight RandomInt8Weight(int64_t n_out, int64_t k, uint32_t seed) {
  std::vector<float> w = RandomNormal(n_out * k, seed);
  absl::StatusOr<Int8Weight> q = Int8Weight::QuantizeFloat(w.data(), n_out, k);
  EXPECT_TRUE(q.ok()) << q.status();
  return *std::move(q);
}

// A random normal [n_out, k] weight as bf16 bits, and a Bf16RowSource over it.
struct Bf16Rows {
  Bf16Rows(int64_t n_out, int64_t k, uint32_t seed) : k(k), bits(static_cast<size_t>(n_out * k)) {
    const std::vector<float> values = RandomNormal(n_out * k, seed);
    for (size_t i = 0; i < bits.size(); ++i) bits[i] = FloatToBf16(values[i]);
  }
  absl::Status operator()(int64_t row0, int64_t rows, uint16_t* dst) const {
    std::copy(bits.begin() + row0 * k, bits.begin() + (row0 + rows) * k, dst);
    return absl::OkStatus();
  }
  int64_t k;
  std::vector<uint16_t> bits;  // [n_out, k]
};

// Both quantized (else the failure), to the same q and scales everywhere.
void ExpectSameGrid(const absl::StatusOr<Int8Weight>& a, const absl::StatusOr<Int8Weight>& b) {
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(a->n_out(), b->n_out());
  ASSERT_EQ(a->k(), b->k());
  for (int64_t r = 0; r < a->n_out(); ++r) {
    ASSERT_EQ(a->scale(r), b->scale(r)) << r;
    for (int64_t c = 0; c < a->k(); ++c) ASSERT_EQ(a->q(r, c), b->q(r, c)) << r << ", " << c;
  }
}

// Runs the body once per kernel this CPU has: the AVX512-VNNI one where present, and
// the AVX2 one always.
class Int8GemmTest : public ::testing::TestWithParam<Int8GemmIsa> {
 protected:
  void SetUp() override {
    if (LimitInt8GemmIsa(GetParam()) != GetParam()) GTEST_SKIP() << "the CPU lacks AVX512-VNNI";
  }
  void TearDown() override { LimitInt8GemmIsa(Int8GemmIsa::kAvx512Vnni); }
};

TEST(Int8QuantizeTest, GridIsPerRowSymmetricAndWithinHalfAStep) {
  const int64_t n_out = 37, k = 301;
  std::vector<float> w = RandomNormal(n_out * k, 3);
  for (int64_t c = 0; c < k; ++c) w[5 * k + c] = 0.0f;     // an all-zero row
  for (int64_t c = 0; c < k; ++c) w[9 * k + c] *= 1000.0f;  // a row on another scale
  absl::StatusOr<Int8Weight> q = Int8Weight::QuantizeFloat(w.data(), n_out, k);
  ASSERT_TRUE(q.ok()) << q.status();
  for (int64_t r = 0; r < n_out; ++r) {
    float amax = 0;
    for (int64_t c = 0; c < k; ++c) amax = std::max(amax, std::fabs(w[r * k + c]));
    EXPECT_FLOAT_EQ(q->scale(r), amax / 127.0f) << "row " << r;
    bool reached = amax == 0.0f;
    for (int64_t c = 0; c < k; ++c) {
      const int v = q->q(r, c);
      ASSERT_LE(std::abs(v), 127);
      reached |= std::abs(v) == 127;
      ASSERT_LE(std::fabs(w[r * k + c] - v * q->scale(r)), 0.5001f * q->scale(r))
          << "[" << r << ", " << c << "]";
    }
    EXPECT_TRUE(reached) << "row " << r << ": the largest weight must use the full range";
  }
  EXPECT_EQ(q->scale(5), 0.0f);
}

// A row of subnormal weights (127 / amax overflows to inf) still quantizes onto its grid,
// with no 0 · inf = NaN turned into an integer: the largest weight at ±127, a zero at 0.
TEST(Int8QuantizeTest, SubnormalRowsStayOnTheirGrid) {
  const float tiny = std::numeric_limits<float>::denorm_min();
  const float w[] = {1000 * tiny, -500 * tiny, 0.0f, 7 * tiny,  // [2, 4]
                     1e-38f,      -1e-38f,     0.0f, 2e-39f};
  absl::StatusOr<Int8Weight> q = Int8Weight::QuantizeFloat(w, 2, 4);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->q(0, 0), 127);
  EXPECT_EQ(q->q(0, 1), -64);  // -63.5 rounds to even
  EXPECT_EQ(q->q(0, 2), 0);
  EXPECT_EQ(q->q(0, 3), 1);    // 0.889
  EXPECT_EQ(q->q(1, 0), 127);
  EXPECT_EQ(q->q(1, 1), -127);
  EXPECT_EQ(q->q(1, 2), 0);
  EXPECT_EQ(q->q(1, 3), 25);   // 25.4
  const uint16_t bits[] = {0x0001, 0x8001, 0x0000, 0x0002};  // bf16 subnormals, [1, 4]
  absl::StatusOr<Int8Weight> b = Int8Weight::QuantizeBf16(bits, 1, 4);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->q(0, 0), 64);   // 63.5 rounds to even
  EXPECT_EQ(b->q(0, 1), -64);
  EXPECT_EQ(b->q(0, 2), 0);
  EXPECT_EQ(b->q(0, 3), 127);
}

// QuantizeFloat quantizes the fp32 value, not its bf16 rounding: 0.5 + 2⁻¹⁰ rounds to
// 0.5 in bf16, which would quantize to 0 (ties to even) instead of 1.
TEST(Int8QuantizeTest, FloatsAreNotRoundedToBf16First) {
  const float w[] = {127.0f, 0.5f + 0x1p-10f};  // [1, 2]: scale 1
  absl::StatusOr<Int8Weight> q = Int8Weight::QuantizeFloat(w, 1, 2);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->scale(0), 1.0f);
  EXPECT_EQ(q->q(0, 1), 1);
  const uint16_t bits[] = {FloatToBf16(127.0f), FloatToBf16(0.5f + 0x1p-10f)};
  absl::StatusOr<Int8Weight> from_bf16 = Int8Weight::QuantizeBf16(bits, 1, 2);
  ASSERT_TRUE(from_bf16.ok());
  EXPECT_EQ(from_bf16->q(0, 1), 0);
}

TEST(Int8QuantizeTest, RejectsNonFiniteWeightsAndBadArguments) {
  for (uint16_t bad : {uint16_t{0x7f80}, uint16_t{0xff80}, uint16_t{0x7fc0}}) {
    const uint16_t bits[] = {0x3f80, 0x3f80, 0x3f80, 0x3f80, 0x3f80, bad};  // [2, 3]
    absl::StatusOr<Int8Weight> w = Int8Weight::QuantizeBf16(bits, 2, 3);
    ASSERT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(w.status().message().find("[1, 2]"), std::string::npos) << w.status();
  }
  for (float bad :
       {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
    const float values[] = {1, bad};
    EXPECT_EQ(Int8Weight::QuantizeFloat(values, 1, 2).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  const uint16_t one = 0x3f80;
  EXPECT_FALSE(Int8Weight::QuantizeBf16(&one, 0, 1).ok());
  EXPECT_FALSE(Int8Weight::QuantizeBf16(nullptr, 1, 1).ok());
  EXPECT_FALSE(Int8Weight::QuantizeFloat(nullptr, 1, 1).ok());
  absl::StatusOr<Int8Weight> w = Int8Weight::QuantizeBf16(&one, 1, 1);
  ASSERT_TRUE(w.ok());
  float x = 1, y = 7;
  EXPECT_EQ(MatMulInt8(&x, -1, *w, &y).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MatMulInt8(nullptr, 1, *w, &y).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MatMulInt8(nullptr, 0, *w, nullptr).ok());
  EXPECT_EQ(y, 7);
}

// Quantizing from a source a chunk at a time gives the whole weight's q and scales, asks
// for the rows in order in chunks within the limit, and names a NaN by its place in the
// whole weight. k = 16384: 128 rows a chunk, so 300 rows take three (128, 128, 44).
TEST(Int8QuantizeTest, RowsFromASourceMatchTheWholeWeight) {
  const int64_t n_out = 300, k = 16384;
  Bf16Rows weight(n_out, k, 11);
  std::vector<uint16_t>& bits = weight.bits;
  std::vector<std::pair<int64_t, int64_t>> asked;  // (row0, rows)
  auto source = [&](int64_t row0, int64_t rows, uint16_t* dst) {
    asked.emplace_back(row0, rows);
    return weight(row0, rows, dst);
  };
  absl::StatusOr<Int8Weight> chunked = Int8Weight::QuantizeBf16Rows(n_out, k, source);
  absl::StatusOr<Int8Weight> whole = Int8Weight::QuantizeBf16(bits.data(), n_out, k);
  ExpectSameGrid(chunked, whole);
  const int64_t limit = Int8Weight::kSourceChunkBytes / (2 * k);
  ASSERT_EQ(asked.size(), 3u);
  int64_t next = 0;
  for (const auto& [row0, rows] : asked) {
    EXPECT_EQ(row0, next);
    EXPECT_LE(rows, limit);
    next += rows;
  }
  EXPECT_EQ(next, n_out);

  bits[200 * k + 5] = 0x7fc0;  // a NaN in the second chunk
  absl::StatusOr<Int8Weight> bad = Int8Weight::QuantizeBf16Rows(n_out, k, source);
  ASSERT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("[200, 5]"), std::string::npos) << bad.status();
  auto failing = [](int64_t row0, int64_t, uint16_t*) {
    return row0 > 0 ? absl::DataLossError("short read") : absl::OkStatus();
  };
  EXPECT_EQ(Int8Weight::QuantizeBf16Rows(n_out, k, failing).status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_FALSE(Int8Weight::QuantizeBf16Rows(0, k, source).ok());
  EXPECT_FALSE(Int8Weight::QuantizeBf16Rows(n_out, 0, source).ok());
}

// A builder fills row ranges in any order (as a merged linear's tensors arrive) to the
// whole weight's q and scales, refuses a row twice or outside, and finishes only whole.
TEST(Int8QuantizeTest, BuilderFillsRangesInAnyOrder) {
  const int64_t n_out = 100, k = 70;
  const Bf16Rows source(n_out, k, 12);
  const std::vector<uint16_t>& bits = source.bits;
  absl::StatusOr<Int8Weight::Builder> builder = Int8Weight::Builder::Create(n_out, k);
  ASSERT_TRUE(builder.ok()) << builder.status();
  ASSERT_TRUE(builder->QuantizeRows(60, 40, source).ok());
  ASSERT_TRUE(builder->QuantizeRows(0, 25, source).ok());
  EXPECT_EQ(builder->QuantizeRows(20, 10, source).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(builder->QuantizeRows(90, 11, source).code(), absl::StatusCode::kInvalidArgument);
  const absl::StatusOr<Int8Weight> early = builder->Finish();
  ASSERT_EQ(early.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(early.status().message().find("row 25 "), std::string::npos) << early.status();
  ASSERT_TRUE(builder->QuantizeRows(25, 35, source).ok());
  absl::StatusOr<Int8Weight> built = builder->Finish();
  absl::StatusOr<Int8Weight> whole = Int8Weight::QuantizeBf16(bits.data(), n_out, k);
  ExpectSameGrid(built, whole);
  EXPECT_EQ(builder->Finish().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(builder->QuantizeRows(0, 1, source).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(Int8Weight::Builder::Create(0, k).ok());
}

// Weights on the grid and small integer x: every product and sum is exact.
TEST_P(Int8GemmTest, ExactOnTheGrid) {
  const float w_values[] = {127, -64, 1, 2, -0.5f, 0.25f};  // [2, 3]: scales 1 and 2/127
  absl::StatusOr<Int8Weight> w = Int8Weight::QuantizeFloat(w_values, 2, 3);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->q(0, 1), -64);
  const float x[] = {1, 2, 4, -1, 0, 8};  // [2, 3]
  float y[] = {10, 20, 30, 40};
  ASSERT_TRUE(MatMulInt8(x, 2, *w, y).ok());
  EXPECT_EQ(y[0], 127 - 128 + 4);
  EXPECT_FLOAT_EQ(y[1], (127 - 2 * 32 + 4 * 16) * (2.0f / 127));
  EXPECT_EQ(y[2], -127 + 8);
  ASSERT_TRUE(MatMulInt8(x, 2, *w, y, /*accumulate=*/true).ok());
  EXPECT_EQ(y[0], 2 * 3);
  EXPECT_EQ(y[2], 2 * -119);
}

// Tails in every dimension: rows not a multiple of the 4- or 48-row block, columns not a
// multiple of 32, x rows around the 6- and 8-row passes, plus TinyLlama's MLP shapes.
TEST_P(Int8GemmTest, MatchesReference) {
  for (auto [n_out, k] : {std::pair<int64_t, int64_t>{1, 1}, {3, 5}, {5, 33}, {67, 129},
                          {130, 31}, {517, 1031}}) {
    Int8Weight w = RandomInt8Weight(n_out, k, 11);
    const std::vector<float> held = Dequantized(w);
    for (int64_t m : {1, 2, 3, 5, 6, 7, 8, 9, 12, 13, 17, 64, 200}) {
      for (bool accumulate : {false, true}) {
        ExpectMatchesReference(w, held, m, accumulate, 5, /*max_checked_rows=*/8, RoundXToInt16);
      }
    }
  }
  for (auto [n_out, k] : {std::pair<int64_t, int64_t>{5632, 2048}, {2048, 5632}}) {
    Int8Weight w = RandomInt8Weight(n_out, k, 13);
    const std::vector<float> held = Dequantized(w);
    for (int64_t m : {1, 8, 70}) ExpectMatchesReference(w, held, m, m == 8, 7, 3, RoundXToInt16);
  }
}

// QuantizeRowToInt16 (vectorized where the VNNI kernel runs, scalar otherwise).
TEST_P(Int8GemmTest, QuantizeRowPowerOfTwoScaleUsingTheUpperHalfOfTheRange) {
  const int64_t k = 1000;
  for (float magnitude : {1e-41f, 1e-30f, 3e-3f, 1.0f, 0.99997f, 1.5f, 7e4f, 3e37f}) {
    std::vector<float> x = RandomNormal(k, 17);
    for (float& v : x) v *= magnitude;
    std::vector<int16_t> q(k);
    const float scale = QuantizeRowToInt16(x.data(), k, q.data());
    int exponent = 0;
    ASSERT_EQ(std::frexp(scale, &exponent), 0.5f) << "not a power of two: " << scale;
    int largest = 0;
    for (int64_t c = 0; c < k; ++c) {
      largest = std::max(largest, std::abs(int{q[c]}));
      ASSERT_LE(std::fabs(x[c] - q[c] * scale), 0.5f * scale) << magnitude << " at " << c;
    }
    EXPECT_LE(largest, 32767);
    if (magnitude > 1e-38f) {  // denormal rows hold fewer bits than the range
      EXPECT_GE(largest, 16384) << "the row's largest value must use the top bit";
    }
  }
  // Every length's tail (the vector path masks it) and the sign of -0.
  for (int64_t n : {1, 15, 16, 17, 33}) {
    std::vector<float> x = RandomNormal(n, static_cast<uint32_t>(n));
    std::vector<int16_t> got(n + 1, 77);
    const float scale = QuantizeRowToInt16(x.data(), n, got.data());
    for (int64_t c = 0; c < n; ++c) {
      EXPECT_EQ(got[c], static_cast<int16_t>(std::nearbyint(x[c] / scale))) << n << " " << c;
    }
    EXPECT_EQ(got[n], 77) << "wrote past the row";
  }
  // Values within 2⁷ of the largest that are bf16 are held exactly.
  const float exact[] = {-3.0f, 1.0f, 0.5f, 0.3984375f, 0.0f};
  int16_t q[5];
  const float scale = QuantizeRowToInt16(exact, 5, q);
  for (int c = 0; c < 5; ++c) EXPECT_EQ(q[c] * scale, exact[c]);
  const float zeros[] = {0.0f, -0.0f};
  EXPECT_EQ(QuantizeRowToInt16(zeros, 2, q), 0.0f);
  const float bad[] = {1.0f, std::numeric_limits<float>::infinity()};
  EXPECT_TRUE(std::isnan(QuantizeRowToInt16(bad, 2, q)));
  EXPECT_EQ(q[0], 0);
}

// The largest products over a long row: both kernels' int32 sums go to fp32 every 512
// columns, before they could overflow (an overflow would wrap to nonsense); the chunks'
// sums are added in fp32, a rounding or so per chunk.
TEST_P(Int8GemmTest, LongRowsOfLargestValuesDoNotOverflow) {
  const int64_t k = 16384;
  std::vector<float> w_values(2 * k, 1.0f);  // q = 127, scale 1/127
  for (int64_t c = 0; c < k; ++c) w_values[k + c] = c % 2 == 0 ? 1.0f : -1.0f;
  absl::StatusOr<Int8Weight> w = Int8Weight::QuantizeFloat(w_values.data(), 2, k);
  ASSERT_TRUE(w.ok());
  const float top = 32767.0f / 32768.0f;  // quantizes to 32767
  std::vector<float> x(k, top);
  float y[2];
  ASSERT_TRUE(MatMulInt8(x.data(), 1, *w, y).ok());
  const double want = k * double{top};
  const double tol = (k / 512) * 0x1p-24;
  EXPECT_NEAR(y[0], want, want * tol);
  EXPECT_NEAR(y[1], 0.0, want * tol);
}

// A row of y is the same bit for bit whichever other rows share the call (one pass at
// m ≤ 6 or 8, the tiled path or several passes past it, any position in the batch): one
// request's logits do not depend on the batch it was scheduled with.
TEST_P(Int8GemmTest, RowsDoNotDependOnTheRestOfTheBatch) {
  const int64_t n_out = 150, k = 2500;  // a partial panel, a partial chunk
  Int8Weight w = RandomInt8Weight(n_out, k, 21);
  const std::vector<float> x = RandomNormal(40 * k, 22);  // [40, k]
  std::vector<float> alone(n_out), batch(40 * n_out);
  ASSERT_TRUE(MatMulInt8(x.data(), 40, w, batch.data()).ok());
  for (int64_t m : {1, 3, 7, 8, 9, 17, 40}) {
    std::vector<float> part(m * n_out);
    ASSERT_TRUE(MatMulInt8(x.data() + (40 - m) * k, m, w, part.data()).ok());
    for (int64_t j = 0; j < m * n_out; ++j) {
      ASSERT_EQ(part[j], batch[(40 - m) * n_out + j]) << "m " << m << ", element " << j;
    }
  }
}

// The compute threads split the output blocks (decode) or panels (tiled): 2 and 3
// threads give 1 thread's bits, at batch 1, 5 (one pass) and 40 (tiled), for a weight
// of several panels and a partial one.
TEST_P(Int8GemmTest, ThreadCountChangesNoBits) {
  const int64_t n_out = 300, k = 2500;
  Int8Weight w = RandomInt8Weight(n_out, k, 23);
  const std::vector<float> x = RandomNormal(40 * k, 24);
  for (int64_t m : {1, 5, 40}) {
    SetCpuThreads(1);
    std::vector<float> one(m * n_out), many(m * n_out);
    ASSERT_TRUE(MatMulInt8(x.data(), m, w, one.data()).ok());
    for (int threads : {2, 3}) {
      SetCpuThreads(threads);
      ASSERT_TRUE(MatMulInt8(x.data(), m, w, many.data()).ok());
      EXPECT_EQ(many, one) << "m " << m << ", " << threads << " threads";
    }
  }
  SetCpuThreads(1);
}

TEST_P(Int8GemmTest, NonFiniteXPropagatesToItsRowOnly) {
  const float w_values[] = {127, 2, -127, 1};  // [2, 2], on the grid (scale 1)
  absl::StatusOr<Int8Weight> w = Int8Weight::QuantizeFloat(w_values, 2, 2);
  ASSERT_TRUE(w.ok());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float x[] = {nan, 1, 0, 1, 1, 1, 2, 0, 0, 0, 0, 0, 0, 0};  // [7, 2]: past one pass
  float y[14];
  ASSERT_TRUE(MatMulInt8(x, 7, *w, y).ok());
  EXPECT_TRUE(std::isnan(y[0]) && std::isnan(y[1]));
  EXPECT_EQ(y[2], 2.0f);    // [0, 1] · [127, 2]
  EXPECT_EQ(y[5], -126.0f);  // [1, 1] · [-127, 1]
  for (int i = 2; i < 14; ++i) EXPECT_FALSE(std::isnan(y[i])) << i;
}

TEST_P(Int8GemmTest, ConcurrentCallsOnOneWeight) {
  Int8Weight w = RandomInt8Weight(300, 200, 9);
  const std::vector<float> held = Dequantized(w);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int64_t m : {1, 9, 65, 3}) {
        ExpectMatchesReference(w, held, m + t, t % 2, t, 1 << 30, RoundXToInt16);
      }
    });
  }
  for (std::thread& t : threads) t.join();
}

// The arithmetic both kernels promise, in scalar code: per 512-column chunk the exact
// integer sum of the products, converted to fp32; the chunks' sums added in order from 0;
// then (2^e · sum) · scale, added to y's old value when accumulating.
float ScalarModel(const Int8Weight& w, int64_t row, const float* x, bool accumulate, float y0) {
  const int64_t k = w.k(), k_pad = (k + 31) / 32 * 32;
  std::vector<int16_t> xq(static_cast<size_t>(k_pad), 0);
  const float x_scale = QuantizeRowToInt16(x, k, xq.data());
  float total = 0.0f;
  for (int64_t c0 = 0; c0 < k; c0 += 512) {
    int64_t sum = 0;  // wide: the test, not the kernel, checks that it fits int32
    for (int64_t c = c0; c < std::min(k, c0 + 512); ++c) {
      sum += int64_t{xq[c]} * int64_t{w.q(row, c)};
    }
    EXPECT_LT(std::abs(sum), int64_t{1} << 31);
    total += static_cast<float>(sum);
  }
  const float out = (x_scale * total) * w.scale(row);
  return accumulate ? y0 + out : out;
}

TEST_P(Int8GemmTest, MatchesTheScalarModelBitForBit) {
  const int64_t n_out = 70, k = 2100;  // a partial block, three chunks, a partial step
  Int8Weight w = RandomInt8Weight(n_out, k, 33);
  for (int64_t m : {1, 2, 3, 4, 6, 7, 8, 9, 13, 17}) {
    for (bool accumulate : {false, true}) {
      const std::vector<float> x = RandomNormal(m * k, 34 + m);
      const std::vector<float> y0 = RandomNormal(m * n_out, 35);
      std::vector<float> y = y0;
      ASSERT_TRUE(MatMulInt8(x.data(), m, w, y.data(), accumulate).ok());
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t r = 0; r < n_out; ++r) {
          const float want = ScalarModel(w, r, x.data() + i * k, accumulate, y0[i * n_out + r]);
          ASSERT_EQ(y[i * n_out + r], want) << "m " << m << " row " << i << " col " << r;
        }
      }
    }
  }
}

// The AVX2 kernel promises the VNNI kernel's bits (the same exact integer sum of each
// chunk, whichever lanes add it), so a model gives the same logits on either kind of
// host. Each kernel reads its own layout: a weight keeps the one it was quantized for.
TEST(Int8GemmKernelsTest, Avx2GivesTheVnniKernelsBits) {
  if (LimitInt8GemmIsa(Int8GemmIsa::kAvx512Vnni) != Int8GemmIsa::kAvx512Vnni) {
    GTEST_SKIP() << "the CPU lacks AVX512-VNNI";
  }
  const int64_t n_out = 150, k = 2500;  // a partial panel and block, a partial chunk
  Int8Weight w = RandomInt8Weight(n_out, k, 31);
  LimitInt8GemmIsa(Int8GemmIsa::kAvx2);
  Int8Weight w_avx2 = RandomInt8Weight(n_out, k, 31);
  LimitInt8GemmIsa(Int8GemmIsa::kAvx512Vnni);
  // The same grid and scales, quantized by the vector and the scalar loop.
  for (int64_t r = 0; r < n_out; ++r) {
    ASSERT_EQ(w.scale(r), w_avx2.scale(r)) << r;
    for (int64_t c = 0; c < k; ++c) ASSERT_EQ(w.q(r, c), w_avx2.q(r, c)) << r << " " << c;
  }
  for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 17, 40}) {
    const std::vector<float> x = RandomNormal(m * k, 32);
    std::vector<float> vnni(m * n_out), avx2(m * n_out), vnni_later(m * n_out);
    ASSERT_TRUE(MatMulInt8(x.data(), m, w, vnni.data()).ok());
    ASSERT_TRUE(MatMulInt8(x.data(), m, w_avx2, avx2.data()).ok());
    LimitInt8GemmIsa(Int8GemmIsa::kAvx2);  // the weight keeps the VNNI kernel
    ASSERT_TRUE(MatMulInt8(x.data(), m, w, vnni_later.data()).ok());
    LimitInt8GemmIsa(Int8GemmIsa::kAvx512Vnni);
    ASSERT_EQ(vnni_later, vnni) << "m " << m;
    for (int64_t j = 0; j < m * n_out; ++j) {
      ASSERT_EQ(vnni[j], avx2[j]) << "m " << m << ", element " << j;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, Int8GemmTest,
                         ::testing::Values(Int8GemmIsa::kAvx512Vnni, Int8GemmIsa::kAvx2),
                         [](const auto& info) {
                           return info.param == Int8GemmIsa::kAvx2 ? "Avx2" : "Avx512Vnni";
                         });

TEST(PackWeightTest, PacksEachFormatAndFreesTheSource) {
  Bf16Tensor staged({3, 128});
  for (int64_t i = 0; i < staged.numel(); ++i) staged.data()[i] = FloatToBf16(0.01f * (i % 17));
  absl::StatusOr<std::unique_ptr<PackedWeight>> int8 = PackAndFree(staged, WeightFormat::kInt8);
  ASSERT_TRUE(int8.ok()) << int8.status();
  EXPECT_EQ((*int8)->format(), WeightFormat::kInt8);
  EXPECT_TRUE(staged.empty());
  // Rows padded to the kernel's block (48 outputs with VNNI, else 4), a scale each.
  const size_t rows = Int8GemmIsaInUse() == Int8GemmIsa::kAvx512Vnni ? 48 : 4;
  EXPECT_EQ((*int8)->bytes(), rows * 128 + rows * sizeof(float));
  Tensor fp32({3, 40});
  absl::StatusOr<std::unique_ptr<PackedWeight>> bf16 = PackAndFree(fp32, WeightFormat::kBf16);
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  EXPECT_EQ((*bf16)->format(), WeightFormat::kBf16);
  EXPECT_EQ(fp32.numel(), 0);
  Tensor vector({5});
  EXPECT_EQ(PackAndFree(vector, WeightFormat::kInt8).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(vector.numel(), 5);  // not freed on failure
}

// PackBf16RowsFrom packs the rows its source writes in either format as PackBf16Rows
// packs the whole (same products), and returns the source's error.
TEST(PackWeightTest, PacksFromASourceInEitherFormat) {
  const int64_t n_out = 70, k = 96;
  const Bf16Rows source(n_out, k, 5);
  const std::vector<uint16_t>& bits = source.bits;
  const std::vector<float> x = RandomNormal(3 * k, 6);
  for (WeightFormat format : {WeightFormat::kInt8, WeightFormat::kBf16}) {
    absl::StatusOr<std::unique_ptr<PackedWeight>> from = PackBf16RowsFrom(n_out, k, format, source);
    absl::StatusOr<std::unique_ptr<PackedWeight>> whole =
        PackBf16Rows(bits.data(), n_out, k, format);
    ASSERT_TRUE(from.ok()) << from.status();
    ASSERT_TRUE(whole.ok()) << whole.status();
    EXPECT_EQ((*from)->format(), format);
    std::vector<float> y_from(3 * n_out), y_whole(3 * n_out);
    ASSERT_TRUE((*from)->MatMul(x.data(), 3, y_from.data(), false).ok());
    ASSERT_TRUE((*whole)->MatMul(x.data(), 3, y_whole.data(), false).ok());
    EXPECT_EQ(y_from, y_whole) << WeightFormatName(format);
    auto failing = [](int64_t, int64_t, uint16_t*) { return absl::DataLossError("short"); };
    EXPECT_EQ(PackBf16RowsFrom(n_out, k, format, failing).status().code(),
              absl::StatusCode::kDataLoss);
  }
}

}  // namespace
}  // namespace tpserve
