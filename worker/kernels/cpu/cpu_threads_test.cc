#include "worker/kernels/cpu/cpu_threads.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iterator>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

// Each case: the ranges cover [0, count) once, in at most the thread count, each at
// least min_per_thread long (or the whole), and run on that many threads.
TEST(CpuThreadsTest, RangesCoverEveryItemOnceWithinTheLimits) {
  struct Case {
    int threads;
    int64_t count, min_per_thread;
    int want_ranges;
  } cases[] = {{1, 100, 1, 1}, {4, 100, 1, 4}, {4, 100, 30, 3}, {4, 3, 1, 3},
               {4, 7, 8, 1},   {3, 10, 1, 3},  {4, 0, 1, 0},    {8, 1, 0, 1}};
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << c.threads << " threads, " << c.count << " items");
    SetCpuThreads(c.threads);
    std::mutex mu;
    std::vector<std::pair<int64_t, int64_t>> ranges;
    std::set<std::thread::id> ids;
    std::vector<std::atomic<int>> seen(c.count);
    ParallelRanges(c.count, c.min_per_thread, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) ++seen[i];
      std::lock_guard<std::mutex> lock(mu);
      ranges.emplace_back(begin, end);
      ids.insert(std::this_thread::get_id());
    });
    EXPECT_EQ(static_cast<int>(ranges.size()), c.want_ranges);
    EXPECT_EQ(static_cast<int>(ids.size()), c.want_ranges);
    for (int64_t i = 0; i < c.count; ++i) EXPECT_EQ(seen[i], 1) << i;
    for (const auto& [begin, end] : ranges) {
      if (c.want_ranges > 1) { EXPECT_GE(end - begin, std::max<int64_t>(c.min_per_thread, 1)); }
    }
  }
  SetCpuThreads(1);
}

TEST(CpuThreadsTest, EachItemRunsOnce) {
  for (const int threads : {1, 3}) {
    SetCpuThreads(threads);
    for (const int64_t count : {0, 1, 2, 17}) {
      std::vector<std::atomic<int>> seen(count);
      std::mutex mu;
      std::set<std::thread::id> ids;
      ParallelEach(count, [&](int64_t i) {
        ++seen[i];
        std::lock_guard<std::mutex> lock(mu);
        ids.insert(std::this_thread::get_id());
      });
      for (int64_t i = 0; i < count; ++i) EXPECT_EQ(seen[i], 1) << i;
      EXPECT_LE(static_cast<int64_t>(ids.size()), std::min<int64_t>(count, threads));
    }
  }
  SetCpuThreads(1);
}

// Each case: the chunks cover [0, count) once, each at least min_chunk long but the one
// that ends the range, on at most `threads` threads (one, inline, when count < 2 · min_chunk).
TEST(CpuThreadsTest, ChunksCoverEveryItemOnce) {
  struct Case {
    int threads;
    int64_t count, min_chunk;
    int max_threads;
  } cases[] = {{1, 100, 1, 1}, {2, 100, 1, 2}, {3, 100, 4, 3}, {4, 7, 4, 1},
               {2, 3, 1, 2},   {4, 0, 1, 0},   {2, 1, 0, 1},   {2, 176, 4, 2},
               {0, 10, 1, 1},  {-2, 10, 1, 1}};
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << c.threads << " threads, " << c.count << " items, "
                                    << c.min_chunk << " a chunk");
    std::mutex mu;
    std::vector<std::pair<int64_t, int64_t>> chunks;
    std::set<std::thread::id> ids;
    std::vector<std::atomic<int>> seen(c.count);
    ParallelChunks(c.count, c.min_chunk, c.threads, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) ++seen[i];
      std::lock_guard<std::mutex> lock(mu);
      chunks.emplace_back(begin, end);
      ids.insert(std::this_thread::get_id());
    });
    for (int64_t i = 0; i < c.count; ++i) EXPECT_EQ(seen[i], 1) << i;
    EXPECT_LE(static_cast<int>(ids.size()), c.max_threads);
    for (const auto& [begin, end] : chunks) {
      EXPECT_LT(begin, end);
      if (end != c.count) { EXPECT_GE(end - begin, std::max<int64_t>(c.min_chunk, 1)); }
    }
  }
}

// A thread that runs slower takes fewer items than an even split's share: here the first
// thread to start takes 5 ms an item and the other none, so the fast one takes what is
// left after the slow one's first chunk (a quarter of the items). Fails with a static split.
TEST(CpuThreadsTest, ASlowThreadTakesFewerItems) {
  constexpr int64_t kCount = 64;
  std::mutex mu;
  std::thread::id slow;
  bool have_slow = false;
  std::map<std::thread::id, int64_t> taken;
  ParallelChunks(kCount, 1, 2, [&](int64_t begin, int64_t end) {
    bool is_slow;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!have_slow) {
        slow = std::this_thread::get_id();
        have_slow = true;
      }
      is_slow = std::this_thread::get_id() == slow;
      taken[std::this_thread::get_id()] += end - begin;
    }
    if (is_slow) std::this_thread::sleep_for(std::chrono::milliseconds(5 * (end - begin)));
  });
  ASSERT_EQ(taken.size(), 2u);
  EXPECT_LT(taken[slow], kCount / 2);
  EXPECT_EQ(taken.begin()->second + std::next(taken.begin())->second, kCount);
}

TEST(CpuThreadsTest, ACountBelowOneIsOne) {
  SetCpuThreads(0);
  EXPECT_EQ(CpuThreads(), 1);
  SetCpuThreads(-3);
  EXPECT_EQ(CpuThreads(), 1);
}

}  // namespace
}  // namespace tpserve
