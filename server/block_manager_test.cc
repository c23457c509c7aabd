#include "server/block_manager.h"

#include <cstdint>
#include <iterator>
#include <map>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tpserve {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

BlockManagerConfig Config(int32_t num_blocks, int32_t block_size, int32_t watermark = 0) {
  BlockManagerConfig config;
  config.num_blocks = num_blocks;
  config.block_size = block_size;
  config.watermark_blocks = watermark;
  return config;
}

BlockManager Make(int32_t num_blocks, int32_t block_size, int32_t watermark = 0) {
  absl::StatusOr<BlockManager> bm = BlockManager::Create(Config(num_blocks, block_size, watermark));
  EXPECT_TRUE(bm.ok()) << bm.status();
  return *std::move(bm);
}

std::vector<int32_t> Table(const BlockManager& bm, BlockManager::SeqId id) {
  absl::StatusOr<absl::Span<const int32_t>> table = bm.block_table(id);
  EXPECT_TRUE(table.ok()) << table.status();
  return table.ok() ? std::vector<int32_t>(table->begin(), table->end())
                    : std::vector<int32_t>{};
}

TEST(BlockManagerConfig, RejectsBadSizes) {
  EXPECT_FALSE(BlockManager::Create(Config(0, 16)).ok());
  EXPECT_FALSE(BlockManager::Create(Config(4, 0)).ok());
  EXPECT_FALSE(BlockManager::Create(Config(4, 16, /*watermark=*/4)).ok());
  EXPECT_FALSE(BlockManager::Create(Config(4, 16, /*watermark=*/-1)).ok());
  EXPECT_TRUE(BlockManager::Create(Config(4, 16, /*watermark=*/3)).ok());
}

TEST(BlockManager, AllocateAppendFreeAccounting) {
  BlockManager bm = Make(/*num_blocks=*/8, /*block_size=*/4);
  EXPECT_EQ(bm.num_free_blocks(), 8);
  EXPECT_EQ(bm.BlocksFor(9), 3);

  ASSERT_TRUE(bm.Allocate(1, 9).ok());  // 3 blocks, last one has 3 free slots
  EXPECT_THAT(Table(bm, 1), ElementsAre(0, 1, 2));
  EXPECT_EQ(bm.num_used_blocks(), 3);
  EXPECT_EQ(bm.num_free_blocks(), 5);

  // Decoding within the last block adds nothing; crossing its end adds one block.
  for (int64_t total : {10, 11, 12}) {
    absl::StatusOr<std::vector<int32_t>> added = bm.AppendSlots(1, total);
    ASSERT_TRUE(added.ok()) << added.status();
    EXPECT_THAT(*added, IsEmpty()) << total;
  }
  absl::StatusOr<std::vector<int32_t>> added = bm.AppendSlots(1, 13);
  ASSERT_TRUE(added.ok());
  EXPECT_THAT(*added, ElementsAre(3));
  // Several blocks at once (a prefill chunk), returned in table order.
  added = bm.AppendSlots(1, 21);
  ASSERT_TRUE(added.ok());
  EXPECT_THAT(*added, ElementsAre(4, 5));
  EXPECT_THAT(Table(bm, 1), ElementsAre(0, 1, 2, 3, 4, 5));
  EXPECT_EQ(*bm.num_tokens(1), 21);

  ASSERT_TRUE(bm.Allocate(2, 1).ok());
  EXPECT_THAT(Table(bm, 2), ElementsAre(6));
  EXPECT_EQ(bm.num_used_blocks(), 7);

  ASSERT_TRUE(bm.Free(1).ok());
  EXPECT_EQ(bm.num_used_blocks(), 1);
  EXPECT_FALSE(bm.Contains(1));
  EXPECT_EQ(bm.block_table(1).status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(bm.Free(2).ok());
  EXPECT_EQ(bm.num_free_blocks(), 8);
  EXPECT_EQ(bm.num_sequences(), 0);
}

TEST(BlockManager, ErrorsOnUnknownDuplicateAndShrink) {
  BlockManager bm = Make(4, 4);
  EXPECT_EQ(bm.Free(7).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(bm.AppendSlots(7, 5).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(bm.Allocate(7, 0).code(), absl::StatusCode::kInvalidArgument);

  ASSERT_TRUE(bm.Allocate(7, 5).ok());
  EXPECT_EQ(bm.Allocate(7, 1).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(bm.AppendSlots(7, 4).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Table(bm, 7), ElementsAre(0, 1));
  EXPECT_EQ(*bm.num_tokens(7), 5);

  ASSERT_TRUE(bm.Free(7).ok());
  EXPECT_EQ(bm.Free(7).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(bm.num_free_blocks(), 4);
}

TEST(BlockManager, ExhaustionLeavesStateUnchanged) {
  BlockManager bm = Make(4, 4);
  ASSERT_TRUE(bm.Allocate(1, 8).ok());  // blocks 0, 1
  EXPECT_FALSE(bm.CanAllocate(9));
  EXPECT_EQ(bm.Allocate(2, 9).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_FALSE(bm.Contains(2));
  EXPECT_EQ(bm.num_free_blocks(), 2);

  EXPECT_FALSE(bm.CanAppendSlots(1, 17));
  EXPECT_EQ(bm.AppendSlots(1, 17).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(Table(bm, 1), ElementsAre(0, 1));
  EXPECT_EQ(*bm.num_tokens(1), 8);
  EXPECT_EQ(bm.num_free_blocks(), 2);

  // The failed calls took nothing: both free blocks are still there, in order.
  EXPECT_TRUE(bm.CanAppendSlots(1, 16));
  absl::StatusOr<std::vector<int32_t>> added = bm.AppendSlots(1, 16);
  ASSERT_TRUE(added.ok());
  EXPECT_THAT(*added, ElementsAre(2, 3));
  EXPECT_EQ(bm.num_free_blocks(), 0);
  EXPECT_FALSE(bm.CanAllocate(1));
}

TEST(BlockManager, WatermarkHoldsBlocksForRunningSequences) {
  BlockManager bm = Make(/*num_blocks=*/4, /*block_size=*/4, /*watermark=*/1);
  EXPECT_FALSE(bm.CanAllocate(13));  // 4 blocks would leave none
  EXPECT_EQ(bm.Allocate(1, 13).code(), absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(bm.Allocate(1, 12).ok());
  EXPECT_FALSE(bm.CanAllocate(1));
  // A running sequence may take the reserved block.
  absl::StatusOr<std::vector<int32_t>> added = bm.AppendSlots(1, 13);
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_THAT(*added, ElementsAre(3));
}

// Every block is in exactly one place: the free pool or one sequence's table, and
// each table is exactly as long as its token count needs.
void CheckInvariants(const BlockManager& bm, const std::map<uint64_t, int64_t>& tokens) {
  std::set<int32_t> owned;
  int64_t used = 0;
  for (const auto& [id, num_tokens] : tokens) {
    std::vector<int32_t> table = Table(bm, id);
    ASSERT_EQ(static_cast<int64_t>(table.size()), bm.BlocksFor(num_tokens)) << id;
    ASSERT_EQ(*bm.num_tokens(id), num_tokens);
    for (int32_t block : table) {
      ASSERT_GE(block, 0);
      ASSERT_LT(block, bm.num_blocks());
      ASSERT_TRUE(owned.insert(block).second) << "block " << block << " handed out twice";
    }
    used += static_cast<int64_t>(table.size());
  }
  ASSERT_EQ(bm.num_sequences(), static_cast<int64_t>(tokens.size()));
  ASSERT_EQ(bm.num_used_blocks(), used);
  ASSERT_EQ(bm.num_free_blocks() + bm.num_used_blocks(), bm.num_blocks());
}

TEST(BlockManager, RandomisedNeverHandsOutABlockTwice) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937 rng(seed);
    const int32_t num_blocks = 1 + static_cast<int32_t>(rng() % 64);
    const int32_t block_size = 1 + static_cast<int32_t>(rng() % 16);
    const int32_t watermark = static_cast<int32_t>(rng() % num_blocks);
    BlockManager bm = Make(num_blocks, block_size, watermark);
    std::map<uint64_t, int64_t> tokens;  // the model: seq id → token count
    uint64_t next_id = 0;
    auto pick = [&]() {
      auto it = tokens.begin();
      std::advance(it, rng() % tokens.size());
      return it->first;
    };
    for (int op = 0; op < 2000; ++op) {
      const uint32_t kind = rng() % 10;
      if (kind < 3 || tokens.empty()) {
        const int64_t n = 1 + rng() % (3 * block_size * 4);
        const bool fits = bm.BlocksFor(n) <= bm.num_free_blocks() - watermark;
        EXPECT_EQ(bm.CanAllocate(n), fits);
        const absl::Status s = bm.Allocate(next_id, n);
        ASSERT_EQ(s.ok(), fits) << s;
        if (fits) {
          tokens[next_id] = n;
        } else {
          ASSERT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
        }
        ++next_id;
      } else if (kind < 8) {
        const uint64_t id = pick();
        const int64_t total = tokens[id] + rng() % (2 * block_size);
        const int64_t extra = bm.BlocksFor(total) - bm.BlocksFor(tokens[id]);
        const bool fits = extra <= bm.num_free_blocks();
        EXPECT_EQ(bm.CanAppendSlots(id, total), fits);
        absl::StatusOr<std::vector<int32_t>> added = bm.AppendSlots(id, total);
        ASSERT_EQ(added.ok(), fits) << added.status();
        if (fits) {
          ASSERT_EQ(static_cast<int64_t>(added->size()), extra);
          tokens[id] = total;
        }
      } else {
        const uint64_t id = pick();
        ASSERT_TRUE(bm.Free(id).ok());
        tokens.erase(id);
        ASSERT_EQ(bm.Free(id).code(), absl::StatusCode::kNotFound);
      }
      CheckInvariants(bm, tokens);
      if (HasFatalFailure()) return;
    }
  }
}

BlockManager MakeCaching(int32_t num_blocks, int32_t block_size, int32_t watermark = 0) {
  BlockManagerConfig config = Config(num_blocks, block_size, watermark);
  config.prefix_caching = true;
  absl::StatusOr<BlockManager> bm = BlockManager::Create(config);
  EXPECT_TRUE(bm.ok()) << bm.status();
  return *std::move(bm);
}

TEST(BlockManagerPrefixCache, OfferedBlocksMatchWholeBlockPrefixesOnly) {
  BlockManager bm = MakeCaching(8, 2);
  ASSERT_TRUE(bm.Allocate(1, 5).ok());  // blocks 0, 1, 2
  ASSERT_TRUE(bm.CacheBlocks(1, {1, 2, 3, 4}).ok());
  EXPECT_EQ(*bm.num_cached_blocks(1), 2);
  EXPECT_EQ(bm.num_cached_blocks(), 2);
  EXPECT_THAT(bm.MatchPrefix({1, 2, 3, 4, 5}, 5), ElementsAre(0, 1));
  EXPECT_THAT(bm.MatchPrefix({1, 2, 3, 4, 5}, 3), ElementsAre(0));  // max_tokens
  EXPECT_THAT(bm.MatchPrefix({1, 2, 3, 9}, 4), ElementsAre(0));     // second block differs
  EXPECT_THAT(bm.MatchPrefix({3, 4}, 2), IsEmpty());  // block 1's tokens, but not after [1, 2]
  EXPECT_THAT(bm.MatchPrefix({1}, 1), IsEmpty());     // no whole block
  // Only whole blocks of the sequence's tokens can be offered.
  EXPECT_EQ(bm.CacheBlocks(1, {5}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bm.CacheBlocks(1, {5, 6}).code(), absl::StatusCode::kInvalidArgument);  // 6 > 5 tokens
  EXPECT_EQ(bm.CacheBlocks(7, {1, 2}).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(*bm.num_cached_blocks(1), 2);
}

TEST(BlockManagerPrefixCache, WithoutPrefixCachingNothingMatches) {
  BlockManager bm = Make(8, 2);
  ASSERT_TRUE(bm.Allocate(1, 4).ok());
  ASSERT_TRUE(bm.CacheBlocks(1, {1, 2, 3, 4}).ok());
  EXPECT_EQ(*bm.num_cached_blocks(1), 0);
  EXPECT_THAT(bm.MatchPrefix({1, 2, 3, 4, 5}, 5), IsEmpty());
  ASSERT_TRUE(bm.Free(1).ok());
  EXPECT_EQ(bm.num_cached_blocks(), 0);
}

TEST(BlockManagerPrefixCache, SharedBlocksAreCountedOnceAndOutliveTheirSequence) {
  BlockManager bm = MakeCaching(6, 2);
  ASSERT_TRUE(bm.Allocate(1, 5).ok());  // 0, 1, 2
  ASSERT_TRUE(bm.CacheBlocks(1, {1, 2, 3, 4}).ok());
  const std::vector<int32_t> cached = bm.MatchPrefix({1, 2, 3, 4, 7}, 4);
  ASSERT_THAT(cached, ElementsAre(0, 1));
  // Held blocks cost nothing: 5 tokens need 3 blocks, 2 of them shared.
  EXPECT_TRUE(bm.CanAllocate(5, cached));
  ASSERT_TRUE(bm.Allocate(2, 5, cached).ok());
  EXPECT_THAT(Table(bm, 2), ElementsAre(0, 1, 3));
  EXPECT_EQ(*bm.num_cached_blocks(2), 2);
  EXPECT_EQ(bm.num_used_blocks(), 4);
  ASSERT_TRUE(bm.Free(1).ok());  // block 2 is free; 0 and 1 stay with sequence 2
  EXPECT_EQ(bm.num_used_blocks(), 3);
  ASSERT_TRUE(bm.Free(2).ok());  // 0 and 1 cached and free, 3 free
  EXPECT_EQ(bm.num_used_blocks(), 0);
  EXPECT_EQ(bm.num_free_blocks(), 6);
  EXPECT_EQ(bm.num_cached_blocks(), 2);
  // An unheld cached block costs one free block: 2 hits + 2 new = 4 of 6, watermark aside.
  EXPECT_THAT(bm.MatchPrefix({1, 2, 3, 4, 5, 6, 7, 8}, 8), ElementsAre(0, 1));
  EXPECT_TRUE(bm.CanAllocate(8, cached));
  ASSERT_TRUE(bm.Allocate(3, 8, cached).ok());
  EXPECT_EQ(bm.num_used_blocks(), 4);
  EXPECT_EQ(bm.num_cached_blocks(), 2);
  // More shared blocks than the tokens need, or a block that is not cached: refused, and
  // nothing changes.
  EXPECT_EQ(bm.Allocate(4, 2, cached).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bm.Allocate(4, 6, {5}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(bm.CanAllocate(6, {5}));
  EXPECT_FALSE(bm.CanAllocate(6, {-1}));
  EXPECT_FALSE(bm.CanAllocate(6, {99}));
  EXPECT_FALSE(bm.Contains(4));
  EXPECT_EQ(bm.num_used_blocks(), 4);
}

TEST(BlockManagerPrefixCache, FreshBlocksGoFirstThenTheLeastRecentlyReleasedLastBlocks) {
  BlockManager bm = MakeCaching(4, 2);
  ASSERT_TRUE(bm.Allocate(1, 4).ok());  // 0, 1
  ASSERT_TRUE(bm.CacheBlocks(1, {1, 2, 3, 4}).ok());
  ASSERT_TRUE(bm.Free(1).ok());
  // Two never-cached blocks are taken before any cached one.
  ASSERT_TRUE(bm.Allocate(2, 4).ok());
  EXPECT_THAT(Table(bm, 2), ElementsAre(2, 3));
  EXPECT_THAT(bm.MatchPrefix({1, 2, 3, 4}, 4), ElementsAre(0, 1));
  // The next evicts sequence 1's last block first, so its first block still matches.
  ASSERT_TRUE(bm.Allocate(3, 1).ok());
  EXPECT_THAT(Table(bm, 3), ElementsAre(1));
  EXPECT_EQ(bm.num_cached_blocks(), 1);
  EXPECT_THAT(bm.MatchPrefix({1, 2, 3, 4}, 4), ElementsAre(0));
  // Matching a block takes it out of the evictable pool.
  const std::vector<int32_t> cached = bm.MatchPrefix({1, 2, 5}, 2);
  ASSERT_TRUE(bm.Allocate(4, 2, cached).ok());
  EXPECT_EQ(bm.num_free_blocks(), 0);
  EXPECT_EQ(bm.Allocate(5, 1).code(), absl::StatusCode::kResourceExhausted);
}

TEST(BlockManagerPrefixCache, AnEvictedBlockNoLongerLeadsToTheBlocksCachedAfterIt) {
  BlockManager bm = MakeCaching(5, 2);
  ASSERT_TRUE(bm.Allocate(1, 3).ok());  // 0, 1
  ASSERT_TRUE(bm.CacheBlocks(1, {1, 2}).ok());
  // Sequence 2 computed [1, 2] again on its own: its copy stays uncached, and the block
  // after it is cached as following block 0.
  ASSERT_TRUE(bm.Allocate(2, 5).ok());  // 2, 3, 4
  ASSERT_TRUE(bm.CacheBlocks(2, {1, 2, 5, 6}).ok());
  EXPECT_EQ(*bm.num_cached_blocks(2), 2);
  EXPECT_EQ(bm.num_cached_blocks(), 2);
  EXPECT_THAT(bm.MatchPrefix({1, 2, 5, 6, 7}, 4), ElementsAre(0, 3));
  ASSERT_TRUE(bm.Free(1).ok());  // evictable: 0
  ASSERT_TRUE(bm.Free(2).ok());  // evictable: 0, 3
  // Three fresh blocks, then block 0 is evicted and holds other tokens.
  ASSERT_TRUE(bm.Allocate(3, 6).ok());
  ASSERT_TRUE(bm.Allocate(4, 2).ok());
  ASSERT_THAT(Table(bm, 4), ElementsAre(0));
  ASSERT_TRUE(bm.CacheBlocks(4, {8, 9}).ok());
  EXPECT_THAT(bm.MatchPrefix({8, 9, 5, 6}, 4), ElementsAre(0));  // not block 3 after it
  EXPECT_THAT(bm.MatchPrefix({1, 2, 5, 6}, 4), IsEmpty());
}

TEST(BlockManagerPrefixCache, ResetDropsHeldAndUnheldBlocksAndKeepsTheAccounts) {
  BlockManager bm = MakeCaching(8, 2);
  ASSERT_TRUE(bm.Allocate(1, 4).ok());  // 0, 1: cached, then freed (evictable)
  ASSERT_TRUE(bm.CacheBlocks(1, {1, 2, 3, 4}).ok());
  ASSERT_TRUE(bm.Free(1).ok());
  ASSERT_TRUE(bm.Allocate(2, 5).ok());  // 2, 3, 4: two cached and held
  ASSERT_TRUE(bm.CacheBlocks(2, {5, 6, 7, 8}).ok());
  ASSERT_TRUE(bm.Allocate(3, 3).ok());  // 5, 6: nothing cached yet
  ASSERT_EQ(bm.num_cached_blocks(), 4);
  EXPECT_EQ(bm.ResetPrefixCache(), 4);
  EXPECT_EQ(bm.num_cached_blocks(), 0);
  EXPECT_THAT(bm.MatchPrefix({1, 2, 3, 4, 0}, 4), IsEmpty());
  EXPECT_THAT(bm.MatchPrefix({5, 6, 7, 8, 0}, 4), IsEmpty());
  // The unheld blocks are free again, the held ones still held.
  EXPECT_EQ(bm.num_used_blocks(), 5);
  EXPECT_THAT(Table(bm, 2), ElementsAre(2, 3, 4));
  // Sequence 2's chain ran through the cache: what it offers now is not cached.
  ASSERT_TRUE(bm.AppendSlots(2, 6).ok());
  ASSERT_TRUE(bm.CacheBlocks(2, {9, 10}).ok());
  EXPECT_EQ(bm.num_cached_blocks(), 0);
  // Sequence 3 had cached nothing: it starts the cache again from the root.
  ASSERT_TRUE(bm.CacheBlocks(3, {11, 12}).ok());
  EXPECT_THAT(bm.MatchPrefix({11, 12, 0}, 2), ElementsAre(5));
  // Freed, the formerly cached blocks return to the free pool, not to the evictable one.
  ASSERT_TRUE(bm.Free(2).ok());
  ASSERT_TRUE(bm.Free(3).ok());
  EXPECT_EQ(bm.num_free_blocks(), bm.num_blocks());
  EXPECT_EQ(bm.num_cached_blocks(), 1);
  EXPECT_EQ(bm.ResetPrefixCache(), 1);
  EXPECT_EQ(bm.ResetPrefixCache(), 0);
  // Every block can be handed out once.
  ASSERT_TRUE(bm.Allocate(4, 16).ok());
  const std::vector<int32_t> table = Table(bm, 4);
  EXPECT_EQ(std::set<int32_t>(table.begin(), table.end()).size(), 8u);
}

TEST(BlockManagerPrefixCache, RandomSharingKeepsEveryBlockAccounted) {
  std::mt19937 rng(7);
  const int32_t bs = 2;
  BlockManager bm = MakeCaching(12, bs, 1);
  // Prompts over a 2-token alphabet, so prefixes repeat; what each live sequence holds.
  std::map<uint64_t, std::vector<int32_t>> live;
  uint64_t next_id = 1;
  for (int op = 0; op < 4000; ++op) {
    if (live.empty() || rng() % 3 != 0) {
      std::vector<int32_t> tokens(1 + rng() % 7);
      for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % 2);
      const std::vector<int32_t> cached =
          bm.MatchPrefix(tokens, static_cast<int64_t>(tokens.size()) - 1);
      const bool can = bm.CanAllocate(static_cast<int64_t>(tokens.size()), cached);
      const absl::Status s = bm.Allocate(next_id, static_cast<int64_t>(tokens.size()), cached);
      ASSERT_EQ(s.ok(), can) << s;
      if (s.ok()) {
        const std::vector<int32_t> table = Table(bm, next_id);
        ASSERT_TRUE(std::equal(cached.begin(), cached.end(), table.begin()));
        const int64_t whole = static_cast<int64_t>(tokens.size()) / bs * bs;
        const int64_t from = static_cast<int64_t>(cached.size()) * bs;
        ASSERT_TRUE(bm.CacheBlocks(next_id, absl::MakeConstSpan(tokens).subspan(
                                                from, std::max<int64_t>(whole - from, 0)))
                        .ok());
        live[next_id] = table;
      }
      ++next_id;
    } else if (rng() % 16 == 0) {
      bm.ResetPrefixCache();
      ASSERT_EQ(bm.num_cached_blocks(), 0);
    } else {
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      ASSERT_TRUE(bm.Free(it->first).ok());
      live.erase(it);
    }
    // A block is held by live sequences or free, never both; none is lost.
    std::set<int32_t> held;
    for (const auto& [id, table] : live) held.insert(table.begin(), table.end());
    ASSERT_EQ(static_cast<int32_t>(held.size()), bm.num_used_blocks());
    ASSERT_EQ(bm.num_used_blocks() + bm.num_free_blocks(), bm.num_blocks());
  }
  for (const auto& [id, table] : live) ASSERT_TRUE(bm.Free(id).ok());
  EXPECT_EQ(bm.num_free_blocks(), bm.num_blocks());
}

}  // namespace
}  // namespace tpserve
