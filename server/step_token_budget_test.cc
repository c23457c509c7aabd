#include "server/step_token_budget.h"

#include "gtest/gtest.h"

namespace tpserve {
namespace {

TEST(StepTokenBudgetTest, WithoutATargetTheBudgetIsTheLimit) {
  StepTokenBudget budget(absl::ZeroDuration(), 2048);
  EXPECT_EQ(budget.tokens(), 2048);
  budget.Observe(2048, absl::Seconds(80), /*prefill=*/true);
  EXPECT_EQ(budget.tokens(), 2048);
}

TEST(StepTokenBudgetTest, StartsSmallThenFitsTheTarget) {
  StepTokenBudget budget(absl::Seconds(1), 2048);
  EXPECT_EQ(budget.tokens(), StepTokenBudget::kInitialTokens);
  // Decode steps alone give F but no cost per token: still the initial budget.
  budget.Observe(3, absl::Milliseconds(250), /*prefill=*/false);
  EXPECT_EQ(budget.tokens(), StepTokenBudget::kInitialTokens);
  // 64 tokens in 3.2 s (about 50 ms a token, as a 1.1B model's prefill on one slow core):
  // c is (3.2 s - 0.25 s) / 61 tokens, F what is left of the small step's 250 ms.
  budget.Observe(64, absl::Milliseconds(3200), /*prefill=*/true);
  EXPECT_NEAR(absl::ToDoubleMilliseconds(budget.per_token()), 2950.0 / 61, 1e-6);
  EXPECT_NEAR(absl::ToDoubleMilliseconds(budget.fixed()), 250 - 3 * 2950.0 / 61, 1e-6);
  EXPECT_EQ(budget.tokens(), 18);  // (1000 - 104.9) / 48.4
}

// Without a decode step the fixed part is counted into every token (the budget errs
// short); a large step alone is never taken for the fixed part.
TEST(StepTokenBudgetTest, BeforeASmallStepEveryTokenCarriesTheFixedPart) {
  StepTokenBudget budget(absl::Milliseconds(500), 4096);
  budget.Observe(200, absl::Milliseconds(480), /*prefill=*/true);
  EXPECT_EQ(budget.fixed(), absl::ZeroDuration());
  EXPECT_NEAR(absl::ToDoubleMilliseconds(budget.per_token()), 2.4, 1e-9);
  EXPECT_EQ(budget.tokens(), 208);  // 500 / 2.4
}

// The model separates the part every step pays from a token's: a host streaming its
// weights in 80 ms a step and computing 2 ms a token gets (500 - 80) / 2 = 210 tokens for
// a 500 ms target, and a run of decode-only steps (8 tokens in 96 ms: 12 ms "a token"
// counted whole, which shrank the former estimate's budget to 41) does not change it.
TEST(StepTokenBudgetTest, DecodeStepsMeasureTheFixedPartNotATokensCost) {
  StepTokenBudget budget(absl::Milliseconds(500), 4096);
  budget.Observe(4, absl::Milliseconds(88), /*prefill=*/false);    // F + 4c
  budget.Observe(200, absl::Milliseconds(480), /*prefill=*/true);  // F + 200c
  EXPECT_NEAR(absl::ToDoubleMilliseconds(budget.per_token()), 2.0, 1e-9);
  EXPECT_NEAR(absl::ToDoubleMilliseconds(budget.fixed()), 80.0, 1e-9);
  EXPECT_GE(budget.tokens(), 209);  // (500 - 80) / 2, truncated after rounding error
  EXPECT_LE(budget.tokens(), 210);
  for (int i = 0; i < 50; ++i) {
    budget.Observe(8, absl::Milliseconds(96), /*prefill=*/false);  // F + 8c
  }
  EXPECT_NEAR(absl::ToDoubleMilliseconds(budget.per_token()), 2.0, 1e-6);
  EXPECT_NEAR(absl::ToDoubleMilliseconds(budget.fixed()), 80.0, 1e-6);
  EXPECT_GE(budget.tokens(), 209);
  EXPECT_LE(budget.tokens(), 210);
  // Wide decode batches and prefill chunks of other sizes on the same line keep it.
  budget.Observe(32, absl::Milliseconds(144), /*prefill=*/false);
  budget.Observe(600, absl::Milliseconds(1280), /*prefill=*/true);
  EXPECT_NEAR(absl::ToDoubleMilliseconds(budget.per_token()), 2.0, 1e-6);
  EXPECT_GE(budget.tokens(), 209);
  EXPECT_LE(budget.tokens(), 210);
}

// Prefill steps no slower than decode steps (a host whose short prefills are still
// bound by reading the weights) say a token costs nothing yet: the whole limit, until a
// slower prefill step moves the model at once.
TEST(StepTokenBudgetTest, TokensThatCostNothingSeenGiveTheLimit) {
  StepTokenBudget budget(absl::Milliseconds(500), 1024);
  budget.Observe(2, absl::Milliseconds(80), /*prefill=*/false);
  budget.Observe(32, absl::Milliseconds(78), /*prefill=*/true);
  EXPECT_EQ(budget.per_token(), absl::ZeroDuration());
  EXPECT_EQ(budget.tokens(), 1024);
  budget.Observe(512, absl::Milliseconds(1100), /*prefill=*/true);
  EXPECT_LT(budget.tokens(), 1024);
  EXPECT_GT(budget.tokens(), 200);
}

TEST(StepTokenBudgetTest, FollowsASlowerStepAtOnceAndAFasterOneGradually) {
  StepTokenBudget budget(absl::Milliseconds(500), 4096);
  budget.Observe(100, absl::Milliseconds(100), /*prefill=*/true);  // 1 ms a token
  EXPECT_EQ(budget.tokens(), 500);
  budget.Observe(100, absl::Milliseconds(400), /*prefill=*/true);  // the host got busy: 4 ms
  EXPECT_EQ(budget.tokens(), 125);
  int64_t last = budget.tokens();
  for (int i = 0; i < 40; ++i) {
    budget.Observe(100, absl::Milliseconds(100), /*prefill=*/true);
    EXPECT_GE(budget.tokens(), last);
    last = budget.tokens();
  }
  EXPECT_GE(last, 495);
  EXPECT_LE(last, 500);
}

TEST(StepTokenBudgetTest, StaysWithinTheFloorAndTheLimit) {
  StepTokenBudget budget(absl::Milliseconds(10), 100);
  budget.Observe(10, absl::Seconds(100), /*prefill=*/true);  // 10 s a token
  EXPECT_EQ(budget.tokens(), StepTokenBudget::kMinTokens);
  StepTokenBudget fast(absl::Seconds(10), 100);
  fast.Observe(50, absl::Microseconds(50), /*prefill=*/true);
  EXPECT_EQ(fast.tokens(), 100);
  StepTokenBudget tiny(absl::Seconds(1), 4);
  EXPECT_EQ(tiny.tokens(), 4);
  tiny.Observe(8, absl::Seconds(100), /*prefill=*/true);
  EXPECT_EQ(tiny.tokens(), 4);  // the floor never exceeds the limit
}

}  // namespace
}  // namespace tpserve
