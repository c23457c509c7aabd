#include "worker/kernels/cpu/in_turns.h"

#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

TEST(InTurnsTest, EveryVariantTakesEveryRoundAndTheFirstRotates) {
  std::vector<size_t> order;
  const InTurns timed = TimeInTurns(3, 0.0, [&](size_t v) { order.push_back(v); });
  ASSERT_EQ(order.size(), 3u * 9);  // a warm-up call each, then 8 rounds
  for (size_t v = 0; v < 3; ++v) EXPECT_EQ(order[v], v);
  for (size_t round = 0; round < 8; ++round) {
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(order[3 + 3 * round + i], (i + round) % 3);
  }
  ASSERT_EQ(timed.seconds.size(), 3u);
  EXPECT_EQ(timed.ratio, std::vector<double>({1.0, timed.ratio[1], timed.ratio[2]}));
}

TEST(InTurnsTest, RatiosCompareEachVariantWithTheFirst) {
  const InTurns timed = TimeInTurns(2, 0.0, [](size_t v) {
    std::this_thread::sleep_for(std::chrono::milliseconds(v == 0 ? 2 : 6));
  });
  EXPECT_EQ(timed.ratio[0], 1.0);
  EXPECT_GT(timed.ratio[1], 1.5);
  EXPECT_GE(timed.seconds[0], 0.002);
  EXPECT_GE(timed.seconds[1], 0.006);
}

TEST(InTurnsTest, BestCallsPerSecondCountsRunsOf64) {
  int64_t calls = 0;
  const double rate = BestCallsPerSecond(0.0, [&] { ++calls; });
  EXPECT_EQ(calls, 3 * 64);  // three trials, one run each at min_seconds 0
  EXPECT_GT(rate, 0.0);
  const double slow = BestCallsPerSecond(0.0, [] {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  });
  EXPECT_LT(slow, 1.0 / 200e-6);
}

}  // namespace
}  // namespace tpserve
