#include "client/progress.h"

#include <sstream>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace tpserve {
namespace {

TEST(ProgressLineTest, CountBarPercentAndTime) {
  EXPECT_EQ(ProgressLine("bench", 0, 64, 0, 10), "bench  0/64 [----------]   0% 0.0 s");
  EXPECT_EQ(ProgressLine("bench", 37, 64, 12.34, 10), "bench 37/64 [#####-----]  57% 12.3 s");
  EXPECT_EQ(ProgressLine("bench", 64, 64, 20, 10), "bench 64/64 [##########] 100% 20.0 s");
  EXPECT_EQ(ProgressLine("x", 0, 0, 1, 4), "x 0/0 [####] 100% 1.0 s");
}

TEST(ProgressBarTest, RedrawsInPlaceAtMostEvery100MsAndEndsTheLine) {
  std::ostringstream out;
  ProgressBar bar(out, "bench", 3);
  bar.Update(1);  // drawn: the first
  bar.Update(2);  // too soon: not drawn
  bar.Update(3);  // the last: always drawn
  bar.Finish();
  const std::string text = out.str();
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  const std::vector<std::string> draws =
      absl::StrSplit(text.substr(0, text.size() - 1), '\r', absl::SkipEmpty());
  ASSERT_EQ(draws.size(), 3u) << text;
  EXPECT_EQ(draws[0].substr(0, 10), "bench 1/3 ");
  EXPECT_EQ(draws[1].substr(0, 10), "bench 3/3 ");
  EXPECT_EQ(draws[2].substr(0, 10), "bench 3/3 ");
  EXPECT_EQ(text.find('\n'), text.size() - 1);
}

}  // namespace
}  // namespace tpserve
