#include "base/parallel_for.h"

#include <sched.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

TEST(ParallelForTest, CoversEveryIndexOnceInDisjointRanges) {
  for (int64_t count : {0, 1, 7, 1000, 1001, 65536 + 3}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(count));
    std::mutex mu;
    std::vector<std::pair<int64_t, int64_t>> ranges;
    ParallelFor(count, 100, 8, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) hits[i]++;
      std::lock_guard<std::mutex> lock(mu);
      ranges.emplace_back(begin, end);
    });
    for (int64_t i = 0; i < count; ++i) ASSERT_EQ(hits[i].load(), 1) << count << " @" << i;
    for (const auto& [begin, end] : ranges) EXPECT_LT(begin, end) << "an empty range ran";
    EXPECT_LE(static_cast<int>(ranges.size()), ParallelForThreads(count, 100, 8));
  }
}

TEST(ParallelForTest, SmallCountsRunInlineOnTheCaller) {
  const std::thread::id caller = std::this_thread::get_id();
  std::set<std::thread::id> seen;
  ParallelFor(99, 100, 8, [&](int64_t, int64_t) { seen.insert(std::this_thread::get_id()); });
  EXPECT_EQ(seen, std::set<std::thread::id>{caller});
  EXPECT_EQ(ParallelForThreads(99, 100, 8), 1);
  EXPECT_EQ(ParallelForThreads(1 << 20, 100, 1), 1);
  EXPECT_GE(ParallelForThreads(1 << 20, 100, 8), 1);
  EXPECT_LE(ParallelForThreads(1 << 20, 100, 8), 8);
}

// A process allowed one CPU (taskset, a container's cpuset) runs inline, whatever the
// host's CPU count.
TEST(ParallelForTest, StaysWithinTheCpusTheProcessMayUse) {
  cpu_set_t before;
  ASSERT_EQ(sched_getaffinity(0, sizeof(before), &before), 0);
  int first = 0;
  while (first < CPU_SETSIZE && !CPU_ISSET(first, &before)) ++first;
  ASSERT_LT(first, CPU_SETSIZE);
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  const int threads = ParallelForThreads(1 << 20, 100, 8);
  std::set<std::thread::id> seen;
  std::mutex mu;
  ParallelFor(1 << 20, 100, 8, [&](int64_t, int64_t) {
    std::lock_guard<std::mutex> lock(mu);
    seen.insert(std::this_thread::get_id());
  });
  ASSERT_EQ(sched_setaffinity(0, sizeof(before), &before), 0);
  EXPECT_EQ(threads, 1);
  EXPECT_EQ(seen.size(), 1u);
}

TEST(ParallelForTest, ParallelCopyCopiesEveryByte) {
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{4} << 20, (size_t{13} << 20) + 7}) {
    std::vector<unsigned char> src(bytes), dst(bytes, 0);
    for (size_t i = 0; i < bytes; ++i) src[i] = static_cast<unsigned char>(i * 131 + 7);
    ParallelCopy(dst.data(), src.data(), bytes);
    EXPECT_EQ(dst, src) << bytes << " bytes";
  }
}

}  // namespace
}  // namespace tpserve
