#include "server/step_token_budget.h"

#include "gtest/gtest.h"

namespace tpserve {
namespace {

TEST(StepTokenBudgetTest, WithoutATargetTheBudgetIsTheLimit) {
  StepTokenBudget budget(absl::ZeroDuration(), 2048);
  EXPECT_EQ(budget.tokens(), 2048);
  budget.Observe(2048, absl::Seconds(80));
  EXPECT_EQ(budget.tokens(), 2048);
}

TEST(StepTokenBudgetTest, StartsSmallThenFitsTheTarget) {
  StepTokenBudget budget(absl::Seconds(1), 2048);
  EXPECT_EQ(budget.tokens(), StepTokenBudget::kInitialTokens);
  // 64 tokens in 3.2 s (50 ms a token, as a 1.1B model's prefill on one slow core).
  budget.Observe(64, absl::Milliseconds(3200));
  EXPECT_EQ(budget.tokens(), 20);  // 1 s / 50 ms
  // Decode-only steps say little about a token's cost: ignored.
  budget.Observe(3, absl::Milliseconds(900));
  EXPECT_EQ(budget.tokens(), 20);
}

TEST(StepTokenBudgetTest, FollowsASlowerStepAtOnceAndAFasterOneGradually) {
  StepTokenBudget budget(absl::Milliseconds(500), 4096);
  budget.Observe(100, absl::Milliseconds(100));  // 1 ms a token
  EXPECT_EQ(budget.tokens(), 500);
  budget.Observe(100, absl::Milliseconds(400));  // the host got busy: 4 ms
  EXPECT_EQ(budget.tokens(), 125);
  int64_t last = budget.tokens();
  for (int i = 0; i < 40; ++i) {
    budget.Observe(100, absl::Milliseconds(100));
    EXPECT_GE(budget.tokens(), last);
    last = budget.tokens();
  }
  EXPECT_GE(last, 495);
  EXPECT_LE(last, 500);
}

TEST(StepTokenBudgetTest, StaysWithinTheFloorAndTheLimit) {
  StepTokenBudget budget(absl::Milliseconds(10), 100);
  budget.Observe(10, absl::Seconds(100));  // 10 s a token
  EXPECT_EQ(budget.tokens(), StepTokenBudget::kMinTokens);
  StepTokenBudget fast(absl::Seconds(10), 100);
  fast.Observe(50, absl::Microseconds(50));
  EXPECT_EQ(fast.tokens(), 100);
  StepTokenBudget tiny(absl::Seconds(1), 4);
  EXPECT_EQ(tiny.tokens(), 4);
  tiny.Observe(8, absl::Seconds(100));
  EXPECT_EQ(tiny.tokens(), 4);  // the floor never exceeds the limit
}

}  // namespace
}  // namespace tpserve
