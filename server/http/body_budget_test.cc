#include "server/http/body_budget.h"

#include <algorithm>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

TEST(BodyBudgetTest, ReservationsShareTheLimitAndGiveBackWhatTheyHeld) {
  BodyBudget budget(100);
  BodyReservation a(&budget);
  BodyReservation b(&budget);
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
    BodyReservation c(&budget);
    EXPECT_TRUE(c.Resize(10));
    EXPECT_EQ(budget.held(), 100u);
  }
  EXPECT_EQ(budget.held(), 90u);  // destroyed, given back
  b.Release();
  EXPECT_EQ(budget.held(), 0u);
}

TEST(BodyBudgetTest, ConcurrentReservationsNeverPassTheLimit) {
  constexpr size_t kLimit = 1000;
  BodyBudget budget(kLimit);
  std::vector<std::thread> threads;
  std::vector<size_t> max_seen(8, 0);
  for (size_t t = 0; t < max_seen.size(); ++t) {
    threads.emplace_back([&budget, &max_seen, t] {
      BodyReservation reservation(&budget);
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
