#include "tpserve/v1/batch_limits.h"

#include "gtest/gtest.h"

namespace tpserve {
namespace {

TEST(BatchLimitsTest, DefaultIsValidAndLeavesTheContextToTheModel) {
  const BatchLimits limits = DefaultBatchLimits();
  EXPECT_TRUE(ValidateBatchLimits(limits, "x").ok());
  EXPECT_EQ(limits.max_context(), 0);
  EXPECT_EQ(limits.max_batch_tokens(), kDefaultMaxBatchTokens);
  EXPECT_EQ(limits.max_sequences(), kDefaultMaxSequences);
}

TEST(BatchLimitsTest, EachFieldOutOfRangeIsRefusedByName) {
  struct Case {
    BatchLimits limits;
    const char* message;
  } cases[] = {
      {MakeBatchLimits(-1, 8, 2), "assignment.limits.max_context must be in [0, 1073741824], got -1"},
      {MakeBatchLimits(0, 0, 2), "assignment.limits.max_batch_tokens must be in [1, 1073741824], got 0"},
      {MakeBatchLimits(0, (1 << 30) + 1, 2), "max_batch_tokens must be in [1, 1073741824], got 1073741825"},
      {MakeBatchLimits(0, 8, 0), "assignment.limits.max_sequences must be in [1, 1048576], got 0"},
      {MakeBatchLimits(0, 8, (1 << 20) + 1), "max_sequences must be in [1, 1048576], got 1048577"},
  };
  for (const Case& c : cases) {
    const absl::Status s = ValidateBatchLimits(c.limits, "assignment.limits");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_NE(s.message().find(c.message), absl::string_view::npos) << s;
  }
  EXPECT_TRUE(ValidateBatchLimits(MakeBatchLimits(1 << 30, 1 << 30, 1 << 20), "x").ok());
}

TEST(BatchLimitsTest, ResolveMaxContextTakesTheModelsWhenZeroAndRefusesMore) {
  EXPECT_EQ(*ResolveMaxContext(MakeBatchLimits(0, 8, 2), 4096, "x"), 4096);
  EXPECT_EQ(*ResolveMaxContext(MakeBatchLimits(100, 8, 2), 4096, "x"), 100);
  EXPECT_EQ(*ResolveMaxContext(MakeBatchLimits(4096, 8, 2), 4096, "x"), 4096);
  const auto over = ResolveMaxContext(MakeBatchLimits(4097, 8, 2), 4096, "assignment.limits");
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.status().message().find(
                "assignment.limits.max_context 4097 exceeds the model's max_position_embeddings 4096"),
            absl::string_view::npos)
      << over.status();
  EXPECT_FALSE(ResolveMaxContext(MakeBatchLimits(0, 8, 2), 0, "x").ok());
}

}  // namespace
}  // namespace tpserve
