#include "worker/step_batch.h"

#include "gtest/gtest.h"

namespace tpserve {
namespace {

StepBatch MixedBatch() {
  StepBatch b;
  b.token_ids = {1, 2, 3, 9};
  b.seqs.push_back({3, 3, {4}, true});       // prefill of 3 tokens
  b.seqs.push_back({1, 6, {0, 2}, false});  // decode at position 5
  return b;
}

TEST(StepBatchTest, PositionsSlotsAndLogitRows) {
  const StepBatch b = MixedBatch();
  EXPECT_EQ(b.Positions(), (std::vector<int32_t>{0, 1, 2, 5}));
  EXPECT_EQ(b.Slots(4), (std::vector<int64_t>{16, 17, 18, 9}));
  EXPECT_EQ(b.NumLogitRows(), 4);
  EXPECT_TRUE(b.Validate({1, 8, 4, 1, 8, 8}, 64).ok());
}

TEST(StepBatchTest, RejectsMalformedBatches) {
  const KvCacheShape cache{1, 8, 4, 1, 8, 8};
  StepBatch b = MixedBatch();
  b.token_ids.pop_back();
  EXPECT_FALSE(b.Validate(cache, 64).ok());
  b = MixedBatch();
  b.seqs[1].block_table = {0};  // position 5 needs a second block
  EXPECT_FALSE(b.Validate(cache, 64).ok());
  b = MixedBatch();
  b.seqs[0].block_table = {8};  // no such block
  EXPECT_FALSE(b.Validate(cache, 64).ok());
  b = MixedBatch();
  b.seqs[0].num_new_tokens = 0;
  EXPECT_FALSE(b.Validate(cache, 64).ok());
  EXPECT_FALSE(MixedBatch().Validate(cache, 5).ok());  // context 6 > max 5
}

}  // namespace
}  // namespace tpserve
