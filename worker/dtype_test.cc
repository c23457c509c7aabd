#include "worker/dtype.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

TEST(DTypeTest, NamesRoundTrip) {
  for (const char* name : {"BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16",
                           "BF16", "I32", "U32", "F32", "F64", "I64", "U64"}) {
    auto dtype = DTypeFromName(name);
    ASSERT_TRUE(dtype.ok()) << name;
    EXPECT_STREQ(DTypeName(*dtype), name);
  }
  EXPECT_FALSE(DTypeFromName("F4").ok());
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kF64), 8u);
}

TEST(DTypeTest, HalfConversionsAreExact) {
  EXPECT_EQ(F16ToFloat(0x3c00), 1.0f);
  EXPECT_EQ(F16ToFloat(0xc000), -2.0f);
  EXPECT_EQ(F16ToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(F16ToFloat(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_TRUE(std::isinf(F16ToFloat(0x7c00)));
  EXPECT_TRUE(std::isnan(F16ToFloat(0x7e00)));
  EXPECT_EQ(Bf16ToFloat(0x3f80), 1.0f);
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(3.140625f)), 3.140625f);
  // 1 + 2^-8 is a tie between bf16 1.0 and 1 + 2^-7: rounds to even (1.0).
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f + std::ldexp(1.0f, -8))), 1.0f);
}

TEST(DTypeTest, BulkBf16ConversionMatchesTheScalarOneAndKeepsNaN) {
  std::vector<float> in = {1.0f, -0.0f, 3.140625f, 1.0f + std::ldexp(1.0f, -8),
                           1.0f + 3 * std::ldexp(1.0f, -8), 3.0e38f, -INFINITY, NAN,
                           std::ldexp(1.0f, -130)};
  for (int i = 0; i < 1000; ++i) in.push_back(std::ldexp(static_cast<float>(i) - 500, i % 40 - 20));
  std::vector<uint16_t> out(in.size());
  FloatsToBf16(in.data(), in.size(), out.data());
  for (size_t i = 0; i < in.size(); ++i) EXPECT_EQ(out[i], FloatToBf16(in[i])) << in[i];
  EXPECT_EQ(out[3], 0x3f80);  // the tie rounds to even
  EXPECT_EQ(out[4], 0x3f82);  // 1 + 3·2^-8 rounds up
  EXPECT_EQ(out[6], 0xff80);  // -inf
  EXPECT_TRUE(std::isnan(Bf16ToFloat(out[7])));
  EXPECT_EQ(out[5], 0x7f62);  // 3e38 rounds to a finite bf16
  // Bit patterns spread over all of fp32 (signalling and quiet NaNs of both signs, ±Inf,
  // subnormals, rounding ties and carries into the exponent), eight-lane and tail alike.
  std::vector<uint32_t> patterns = {0x7f800001, 0xff800001, 0x7fffffff, 0xffffffff,
                                    0x7fc00000, 0x7f800000, 0xff800000, 0x7f7fffff,
                                    0x00008000, 0x00018000, 0x3f808000, 0x3f818000, 0x7f7f8000};
  for (uint32_t i = 0; i < (1u << 20); ++i) patterns.push_back(i * 4099u ^ (i << 20));
  std::vector<float> spread(patterns.size());
  std::memcpy(spread.data(), patterns.data(), patterns.size() * sizeof(float));
  std::vector<uint16_t> bulk(spread.size());
  FloatsToBf16(spread.data(), spread.size(), bulk.data());
  for (size_t i = 0; i < spread.size(); ++i) {
    ASSERT_EQ(bulk[i], FloatToBf16(spread[i])) << std::hex << patterns[i];
  }
  // And back, exactly, every bit pattern through the bulk widening.
  std::vector<uint16_t> all(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> wide(all.size());
  Bf16ToFloats(all.data(), all.size(), wide.data());
  for (size_t i = 0; i < all.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &wide[i], sizeof(bits));
    ASSERT_EQ(bits, static_cast<uint32_t>(i) << 16) << i;
  }
}

TEST(DTypeTest, ConvertRejectsNonFloatTypes) {
  std::vector<uint16_t> bf16 = {0x3f80, 0x4000};
  std::vector<float> out(2);
  ASSERT_TRUE(ConvertToFloat(DType::kBF16, bf16.data(), 2, out.data()).ok());
  EXPECT_EQ(out, (std::vector<float>{1.0f, 2.0f}));
  EXPECT_FALSE(ConvertToFloat(DType::kI32, bf16.data(), 1, out.data()).ok());
}

// NaN and ±Inf in any weight dtype are refused by the conversion, naming the element;
// the largest finite values pass.
TEST(DTypeTest, ConvertRefusesNonFiniteValues) {
  std::vector<float> out(4);
  const std::vector<uint16_t> bf16 = {0x3f80, 0x7f7f, 0x7fc0, 0x3f80};  // 1, max, NaN, 1
  absl::Status s = ConvertToFloat(DType::kBF16, bf16.data(), 4, out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("non-finite value nan at element 2"), std::string::npos) << s;
  EXPECT_TRUE(ConvertToFloat(DType::kBF16, bf16.data(), 2, out.data()).ok());
  const std::vector<uint16_t> f16 = {0x7bff, 0xfc00};  // 65504, -inf
  s = ConvertToFloat(DType::kF16, f16.data(), 2, out.data());
  EXPECT_NE(s.message().find("-inf at element 1"), std::string::npos) << s;
  EXPECT_TRUE(ConvertToFloat(DType::kF16, f16.data(), 1, out.data()).ok());
  const std::vector<float> f32 = {3.4e38f, 1.0f, INFINITY};
  s = ConvertToFloat(DType::kF32, f32.data(), 3, out.data());
  EXPECT_NE(s.message().find("inf at element 2"), std::string::npos) << s;
  EXPECT_TRUE(ConvertToFloat(DType::kF32, f32.data(), 2, out.data()).ok());
}

TEST(DTypeTest, FirstNonFiniteBf16) {
  const uint16_t values[] = {0x3f80, 0x0000, 0x8000, 0x7f7f, 0xff80, 0x7fc0};
  EXPECT_EQ(FirstNonFiniteBf16(values, 4), -1);  // 1, ±0, the largest finite
  EXPECT_EQ(FirstNonFiniteBf16(values, 6), 4);   // -Inf first, then a NaN
  EXPECT_EQ(FirstNonFiniteBf16(values + 5, 1), 0);
  EXPECT_EQ(FirstNonFiniteBf16(values, 0), -1);
  // Long runs: the first of several non-finite values wherever it lies (block edges too),
  // and none in a run of the largest finite values of both signs.
  std::vector<uint16_t> run(1000, 0x7f7f);
  for (size_t i = 1; i < run.size(); i += 2) run[i] = 0xff7f;
  EXPECT_EQ(FirstNonFiniteBf16(run.data(), 1000), -1);
  for (int64_t at : {0, 1, 255, 256, 257, 511, 600, 999}) {
    std::vector<uint16_t> bad = run;
    bad[at] = at % 2 ? 0xff80 : 0x7fc1;
    if (at + 3 < 1000) bad[at + 3] = 0x7f80;
    EXPECT_EQ(FirstNonFiniteBf16(bad.data(), 1000), at) << at;
    EXPECT_EQ(FirstNonFiniteBf16(bad.data(), at), -1) << at;
  }
}

}  // namespace
}  // namespace tpserve
