#include "worker/kernels/cpu/bf16_gemm.h"

#include <omp.h>

#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "worker/kernels/cpu/bf16_amx.h"
#include "worker/kernels/cpu/bf16_gemm_testing.h"

namespace tpserve {
namespace {

// HF's [n_out, k] shapes: TinyLlama's MLP down and gate (hidden 2048, intermediate 5632),
// an odd mid-sized one, and tiny odd ones below every oneDNN block size.
TEST(Bf16GemmTest, TinyOddShapesMatchReference) {
  for (auto [n_out, k] : {std::pair<int64_t, int64_t>{3, 5}, {5, 3}, {1, 1}, {67, 129}, {130, 33}}) {
    std::vector<float> w_rounded;
    PackedBf16Weight w = RandomWeight(n_out, k, 11, &w_rounded);
    for (int64_t m : kTestRowCounts) {
      for (bool accumulate : {false, true}) ExpectMatchesReference(w, w_rounded, m, accumulate, 5);
    }
  }
}

TEST(Bf16GemmTest, OddMidShapeMatchesReference) {
  std::vector<float> w_rounded;
  PackedBf16Weight w = RandomWeight(517, 1031, 12, &w_rounded);
  for (int64_t m : kTestRowCounts) {
    for (bool accumulate : {false, true}) {
      ExpectMatchesReference(w, w_rounded, m, accumulate, 6, /*max_checked_rows=*/12);
    }
  }
}

TEST(Bf16GemmTest, LlamaShapesMatchReference) {
  for (auto [n_out, k] : {std::pair<int64_t, int64_t>{5632, 2048}, {2048, 5632}}) {
    std::vector<float> w_rounded;
    PackedBf16Weight w = RandomWeight(n_out, k, 13, &w_rounded);
    for (int64_t m : kTestRowCounts) {
      ExpectMatchesReference(w, w_rounded, m, /*accumulate=*/m == 7, 7, /*max_checked_rows=*/3);
    }
  }
  std::vector<float> w_rounded;
  PackedBf16Weight w = RandomWeight(4096, 4096, 14, &w_rounded);
  for (int64_t m : {1, 8}) ExpectMatchesReference(w, w_rounded, m, false, 8, 2);
}

// The AMX tile kernel's own layout where the CPU has AMX (blocks of 32 x 64), the
// vdpbf16ps kernel's where it has AVX512-BF16 only (32 x 48), oneDNN's (32 x 64) under
// Bf16Kernel::kOneDnn: a 64 x 32 weight needs no padding in 64-output blocks and 32
// outputs of it in 48-output blocks.
TEST(Bf16GemmTest, PacksTheLayoutOfTheCpusKernel) {
  PackedBf16Weight w = RandomWeight(64, 32, 1, nullptr);
  if (bf16_amx::Available()) {
    EXPECT_TRUE(w.runs_on_amx());
    EXPECT_FALSE(w.packed_for_onednn());
    EXPECT_EQ(w.bytes(), 64 * 32 * sizeof(uint16_t));
  } else if (__builtin_cpu_supports("avx512bf16")) {
    EXPECT_TRUE(w.runs_on_avx512_bf16());
    EXPECT_FALSE(w.packed_for_onednn());
    EXPECT_EQ(w.bytes(), 96 * 32 * sizeof(uint16_t));
  }
  if (__builtin_cpu_supports("avx512bf16")) {
    SetBf16Kernel(Bf16Kernel::kOneDnn);
    PackedBf16Weight onednn = RandomWeight(64, 32, 1, nullptr);
    SetBf16Kernel(Bf16Kernel::kOwn);
    EXPECT_TRUE(onednn.packed_for_onednn());
    EXPECT_EQ(onednn.bytes(), 64 * 32 * sizeof(uint16_t));  // already a multiple of the blocks
  }
  PackedBf16Weight odd = RandomWeight(3, 5, 1, nullptr);
  EXPECT_GE(odd.bytes(), 3 * 5 * sizeof(uint16_t));
}

// Exact in bf16 and in fp32: the result must be bit-exact.
TEST(Bf16GemmTest, FromBf16KnownBits) {
  // [[1, -2, 0.5], [0.25, 3, -1]]
  const uint16_t bits[] = {0x3f80, 0xc000, 0x3f00, 0x3e80, 0x4040, 0xbf80};
  absl::StatusOr<PackedBf16Weight> w = PackedBf16Weight::FromBf16(bits, 2, 3);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->n_out(), 2);
  EXPECT_EQ(w->k(), 3);
  const float x[] = {1, 2, 4, -1, 0, 8};  // [2, 3]
  float y[] = {10, 20, 30, 40};
  ASSERT_TRUE(MatMulBf16(x, 2, *w, y).ok());
  EXPECT_EQ(y[0], -1.0f);    // 1 - 4 + 2
  EXPECT_EQ(y[1], 2.25f);    // 0.25 + 6 - 4
  EXPECT_EQ(y[2], 3.0f);     // -1 + 4
  EXPECT_EQ(y[3], -8.25f);   // -0.25 - 8
  ASSERT_TRUE(MatMulBf16(x, 2, *w, y, /*accumulate=*/true).ok());
  EXPECT_EQ(y[0], -2.0f);
  EXPECT_EQ(y[3], -16.5f);
}

TEST(Bf16GemmTest, FromFloatAndXRoundToNearestEven) {
  // 1 + 2⁻⁸ is halfway between 1 and 1 + 2⁻⁷: even is 1. 1 + 3·2⁻⁸ is halfway between
  // 1 + 2⁻⁷ and 1 + 2⁻⁶: even is 1 + 2⁻⁶.
  const float w_values[] = {1 + 0x1p-8f, 1 + 3 * 0x1p-8f};  // [2, 1]
  absl::StatusOr<PackedBf16Weight> w = PackedBf16Weight::FromFloat(w_values, 2, 1);
  ASSERT_TRUE(w.ok()) << w.status();
  const float x[] = {1.0f, 1 + 0x1p-8f};  // [2, 1]; x is rounded the same way
  float y[4];
  ASSERT_TRUE(MatMulBf16(x, 2, *w, y).ok());
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], 1 + 0x1p-6f);
  EXPECT_EQ(y[2], 1.0f);
  EXPECT_EQ(y[3], 1 + 0x1p-6f);
}

TEST(Bf16GemmTest, RejectsNonFiniteWeights) {
  for (uint16_t bad : {uint16_t{0x7f80}, uint16_t{0xff80}, uint16_t{0x7fc0}}) {
    const uint16_t bits[] = {0x3f80, 0x3f80, 0x3f80, 0x3f80, 0x3f80, bad};  // [2, 3]
    absl::StatusOr<PackedBf16Weight> w = PackedBf16Weight::FromBf16(bits, 2, 3);
    ASSERT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(w.status().message().find("[1, 2]"), std::string::npos) << w.status();
  }
  // 3.4e38 is finite in fp32 but rounds to +Inf in bf16.
  for (float bad : {std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity(), 3.4e38f}) {
    const float values[] = {1, bad};
    EXPECT_EQ(PackedBf16Weight::FromFloat(values, 1, 2).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

TEST(Bf16GemmTest, NonFiniteXPropagatesToItsRowOnly) {
  const float w_values[] = {1, 2, -1, 0.5f};  // [2, 2]
  absl::StatusOr<PackedBf16Weight> w = PackedBf16Weight::FromFloat(w_values, 2, 2);
  ASSERT_TRUE(w.ok());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const float x[] = {nan, 1, inf, 0, 1, 1};  // [3, 2]
  float y[6];
  ASSERT_TRUE(MatMulBf16(x, 3, *w, y).ok());
  EXPECT_TRUE(std::isnan(y[0]) && std::isnan(y[1]));
  EXPECT_EQ(y[2], inf);   // inf·1 + 0·2
  EXPECT_EQ(y[3], -inf);  // inf·-1 + 0·0.5
  EXPECT_EQ(y[4], 3.0f);
  EXPECT_EQ(y[5], -0.5f);
}

TEST(Bf16GemmTest, RejectsBadArguments) {
  const uint16_t one = 0x3f80;
  EXPECT_FALSE(PackedBf16Weight::FromBf16(&one, 0, 1).ok());
  EXPECT_FALSE(PackedBf16Weight::FromBf16(&one, 1, -1).ok());
  EXPECT_FALSE(PackedBf16Weight::FromBf16(nullptr, 1, 1).ok());
  EXPECT_FALSE(PackedBf16Weight::FromFloat(nullptr, 1, 1).ok());
  absl::StatusOr<PackedBf16Weight> w = PackedBf16Weight::FromBf16(&one, 1, 1);
  ASSERT_TRUE(w.ok());
  float x = 1, y = 7;
  EXPECT_EQ(MatMulBf16(&x, -1, *w, &y).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MatMulBf16(nullptr, 1, *w, &y).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MatMulBf16(nullptr, 0, *w, nullptr).ok());  // no rows: nothing to do
  EXPECT_EQ(y, 7);
}

// Row counts past kRowsPerPrimitive reuse the full-chunk primitive plus one for the tail
// (oneDNN's matmul, on a weight packed for it under kOneDnn).
TEST(Bf16GemmTest, PrimitiveCacheIsBoundedByChunking) {
  std::vector<float> w_rounded;
  SetBf16Kernel(Bf16Kernel::kOneDnn);  // packed for oneDNN's matmul
  PackedBf16Weight w = RandomWeight(70, 40, 3, &w_rounded);
  if (!w.packed_for_onednn()) {
    SetBf16Kernel(Bf16Kernel::kOwn);
    GTEST_SKIP() << "no oneDNN bf16 matmul on this CPU";
  }
  for (int64_t m : {1, 1, 8, 200, 130, 64}) ExpectMatchesReference(w, w_rounded, m, false, 4);
  EXPECT_EQ(w.num_cached_primitives(), 4u);  // rows 1, 8, 64, 200 - 3·64 = 8, 130 - 2·64 = 2
  ExpectMatchesReference(w, w_rounded, 1, true, 4);
  EXPECT_EQ(w.num_cached_primitives(), 5u);
  SetBf16Kernel(Bf16Kernel::kOwn);
}

// On an AMX CPU the shapes above ran the AMX kernel; oneDNN's matmul, which the same
// packed weight still serves when the kernel is turned off, gets the same checks.
TEST(Bf16GemmTest, OneDnnMatmulMatchesReferenceWithTheAmxKernelOff) {
  SetBf16Kernel(Bf16Kernel::kOneDnn);
  for (auto [n_out, k] : {std::pair<int64_t, int64_t>{3, 5}, {67, 129}, {517, 1031}}) {
    std::vector<float> w_rounded;
    PackedBf16Weight w = RandomWeight(n_out, k, 15, &w_rounded);
    EXPECT_FALSE(w.runs_on_amx());
    for (int64_t m : kTestRowCounts) {
      for (bool accumulate : {false, true}) {
        ExpectMatchesReference(w, w_rounded, m, accumulate, 16, /*max_checked_rows=*/12);
      }
    }
  }
  SetBf16Kernel(Bf16Kernel::kOwn);
}

TEST(Bf16GemmTest, ConcurrentCallsOnOneWeight) {
  std::vector<float> w_rounded;
  PackedBf16Weight w = RandomWeight(300, 200, 9, &w_rounded);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int64_t m : {1, 9, 65, 3}) ExpectMatchesReference(w, w_rounded, m + t, t % 2, t);
    });
  }
  for (std::thread& t : threads) t.join();
}

// OpenMP's thread count is per thread: the setting must reach a thread that never set it.
TEST(Bf16GemmTest, ThreadSettingAppliesOnTheCallingThread) {
  SetBf16GemmThreads(1);
  PackedBf16Weight w = RandomWeight(8, 8, 2, nullptr);
  int seen = 0;
  std::thread([&] {
    std::vector<float> x(8, 1.0f), y(8);
    EXPECT_TRUE(MatMulBf16(x.data(), 1, w, y.data()).ok());
    seen = omp_get_max_threads();
  }).join();
  EXPECT_EQ(seen, 1);
  SetBf16GemmThreads(0);
}

}  // namespace
}  // namespace tpserve
