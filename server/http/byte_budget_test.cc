#include "server/http/byte_budget.h"

#include <algorithm>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

TEST(ByteBudgetTest, ReservationsShareTheLimitAndGiveBackWhatTheyHeld) {
  ByteBudget budget(100);
  ByteReservation a(&budget);
  ByteReservation b(&budget);
  EXPECT_TRUE(a.Resize(60));
  EXPECT_FALSE(b.Resize(41));  // 101 in all
  EXPECT_EQ(b.bytes(), 0u);
  EXPECT_TRUE(b.Resize(40));
  EXPECT_EQ(budget.held(), 100u);
  EXPECT_FALSE(b.Resize(50));  // a refused growth keeps what it held
  EXPECT_EQ(b.bytes(), 40u);
  EXPECT_TRUE(a.Resize(10));  // shrinking gives back the difference
  EXPECT_EQ(budget.held(), 50u);
  EXPECT_TRUE(b.Resize(90));
  a.Release();
  EXPECT_EQ(a.bytes(), 0u);
  EXPECT_EQ(budget.held(), 90u);
  {
    ByteReservation c(&budget);
    EXPECT_TRUE(c.Resize(10));
    EXPECT_EQ(budget.held(), 100u);
  }
  EXPECT_EQ(budget.held(), 90u);  // destroyed, given back
  b.Release();
  EXPECT_EQ(budget.held(), 0u);
}

TEST(ByteBudgetTest, MovedReservationTakesItsShareAlong) {
  ByteBudget budget(100);
  ByteReservation a(&budget);
  ASSERT_TRUE(a.Resize(30));
  ByteReservation b(std::move(a));
  EXPECT_EQ(a.bytes(), 0u);  // NOLINT(bugprone-use-after-move): moved-from holds nothing
  EXPECT_EQ(b.bytes(), 30u);
  EXPECT_EQ(budget.held(), 30u);
  ByteReservation c(&budget);
  ASSERT_TRUE(c.Resize(50));
  c = std::move(b);  // c gives back its 50 and takes b's 30
  EXPECT_EQ(c.bytes(), 30u);
  EXPECT_EQ(budget.held(), 30u);
  a.Release();  // nothing to give back
  EXPECT_EQ(budget.held(), 30u);
  {
    std::vector<ByteReservation> queue;
    queue.push_back(std::move(c));
    EXPECT_EQ(budget.held(), 30u);
  }
  EXPECT_EQ(budget.held(), 0u);  // given back by the last holder only
}

TEST(ByteBudgetTest, ConcurrentReservationsNeverPassTheLimit) {
  constexpr size_t kLimit = 1000;
  ByteBudget budget(kLimit);
  std::vector<std::thread> threads;
  std::vector<size_t> max_seen(8, 0);
  for (size_t t = 0; t < max_seen.size(); ++t) {
    threads.emplace_back([&budget, &max_seen, t] {
      ByteReservation reservation(&budget);
      for (size_t i = 0; i < 20000; ++i) {
        if (reservation.Resize(1 + (i * 7 + t) % 300)) {
          max_seen[t] = std::max(max_seen[t], budget.held());
        }
        if (i % 3 == 0) reservation.Release();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const size_t seen : max_seen) EXPECT_LE(seen, kLimit);
  EXPECT_EQ(budget.held(), 0u);
}

}  // namespace
}  // namespace tpserve
