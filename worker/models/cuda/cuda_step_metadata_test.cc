// The packing of a step's metadata runs on the host; checked here without a GPU.
#include "worker/models/cuda/cuda_step_metadata.h"

#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

template <typename V>
std::vector<V> Read(const std::vector<uint8_t>& buf, size_t offset, size_t count) {
  std::vector<V> out(count);
  std::memcpy(out.data(), buf.data() + offset, count * sizeof(V));
  return out;
}

TEST(StepMetadataTest, PacksAMixedBatch) {
  StepBatch batch;
  // A 5-token prefill from 0 (all logits), a 1-token decode at position 20, and a
  // 3-token chunk at positions 16..18.
  batch.token_ids = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  batch.seqs.push_back({5, 5, {7}, true});
  batch.seqs.push_back({1, 21, {3, 9}, false});
  batch.seqs.push_back({3, 19, {4, 2}, false});
  const StepMetadataLayout layout = PlanStepMetadata(batch);
  EXPECT_EQ(layout.num_tokens, 9);
  EXPECT_EQ(layout.num_seqs, 3);
  EXPECT_EQ(layout.num_logit_rows, 7);
  EXPECT_EQ(layout.table_width, 2);
  for (size_t offset : {layout.token_ids, layout.positions, layout.query_start,
                        layout.context_lens, layout.logit_rows, layout.block_tables,
                        layout.slots}) {
    EXPECT_EQ(offset % 16, 0u);
  }
  std::vector<uint8_t> buf(layout.bytes, 0xAB);
  PackStepMetadata(batch, /*block_size=*/16, layout, buf.data());
  EXPECT_EQ(Read<int32_t>(buf, layout.token_ids, 9), batch.token_ids);
  EXPECT_EQ(Read<int32_t>(buf, layout.positions, 9),
            (std::vector<int32_t>{0, 1, 2, 3, 4, 20, 16, 17, 18}));
  EXPECT_EQ(Read<int32_t>(buf, layout.query_start, 4), (std::vector<int32_t>{0, 5, 6, 9}));
  EXPECT_EQ(Read<int32_t>(buf, layout.context_lens, 3), (std::vector<int32_t>{5, 21, 19}));
  EXPECT_EQ(Read<int32_t>(buf, layout.logit_rows, 7),
            (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 8}));
  EXPECT_EQ(Read<int32_t>(buf, layout.block_tables, 6),
            (std::vector<int32_t>{7, 0, 3, 9, 4, 2}));
  EXPECT_EQ(Read<int64_t>(buf, layout.slots, 9),
            (std::vector<int64_t>{112, 113, 114, 115, 116, 9 * 16 + 4, 2 * 16, 2 * 16 + 1,
                                  2 * 16 + 2}));
}

TEST(StepMetadataTest, LayoutGrowsWithEveryArray) {
  const StepMetadataLayout small = PlanStepMetadata(1, 1, 1, 1);
  const StepMetadataLayout big = PlanStepMetadata(8192, 256, 8192, 8192);
  EXPECT_GT(big.bytes, small.bytes);
  EXPECT_GE(big.bytes, size_t{256} * 8192 * 4 + 8192 * (4 + 4 + 4 + 8));
}

TEST(StepMetadataTest, PaddedDecodeHasAFixedLayoutAndNeverWritesForPadding) {
  StepBatch batch;
  batch.token_ids = {11, 12};
  batch.seqs.push_back({1, 20, {3, 9}, false});
  batch.seqs.push_back({1, 5, {6}, false});
  const StepBatch padded = PadDecodeBatch(batch, 4);
  const StepMetadataLayout layout = PlanPaddedDecode(4, 8);
  std::vector<uint8_t> buf(layout.bytes);
  PackStepMetadata(padded, 16, layout, buf.data());
  MarkPaddingSlots(2, layout, buf.data());
  EXPECT_EQ(Read<int32_t>(buf, layout.token_ids, 4), (std::vector<int32_t>{11, 12, 0, 0}));
  EXPECT_EQ(Read<int32_t>(buf, layout.positions, 4), (std::vector<int32_t>{19, 4, 0, 0}));
  EXPECT_EQ(Read<int64_t>(buf, layout.slots, 4),
            (std::vector<int64_t>{9 * 16 + 3, 6 * 16 + 4, -1, -1}));
  EXPECT_EQ(Read<int32_t>(buf, layout.query_start, 5), (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(Read<int32_t>(buf, layout.context_lens, 4), (std::vector<int32_t>{20, 5, 1, 1}));
  EXPECT_EQ(Read<int32_t>(buf, layout.logit_rows, 4), (std::vector<int32_t>{0, 1, 2, 3}));
  // A table longer than the width is cut to it (its context needs no more).
  StepBatch long_table;
  long_table.token_ids = {5};
  long_table.seqs.push_back({1, 3, {8, 1, 2, 3, 4, 5, 6, 7, 9, 10}, false});
  const StepMetadataLayout narrow = PlanPaddedDecode(1, 2);
  std::vector<uint8_t> cut(narrow.bytes);
  PackStepMetadata(long_table, 16, narrow, cut.data());
  EXPECT_EQ(Read<int32_t>(cut, narrow.block_tables, 2), (std::vector<int32_t>{8, 1}));
  // The layout depends on the padded size and the width only.
  StepBatch other;
  other.token_ids = {1};
  other.seqs.push_back({1, 100, {1, 2, 3, 4, 5, 6, 7}, false});
  EXPECT_EQ(PlanPaddedDecode(4, 8).bytes, layout.bytes);
  EXPECT_EQ(PadDecodeBatch(other, 4).seqs.size(), 4u);
}

}  // namespace
}  // namespace tpserve
