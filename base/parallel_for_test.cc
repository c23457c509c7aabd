#include "base/parallel_for.h"

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
