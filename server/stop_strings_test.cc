#include "server/stop_strings.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace tpserve {
namespace {

// Pushes the pieces, flushing at the end unless stopped; returns every release.
std::vector<std::string> PushAll(StopStringFilter& filter, const std::vector<std::string>& pieces) {
  std::vector<std::string> released;
  for (const std::string& piece : pieces) released.push_back(filter.Push(piece));
  if (!filter.stopped()) released.push_back(filter.Flush());
  return released;
}

TEST(StopStringFilterTest, NoStopsReleasesEverything) {
  StopStringFilter filter({});
  EXPECT_EQ(PushAll(filter, {"ab", "c"}), (std::vector<std::string>{"ab", "c", ""}));
}

TEST(StopStringFilterTest, HoldsBackAPossibleStartAndReleasesIt) {
  StopStringFilter filter({"END"});
  EXPECT_EQ(filter.Push("abE"), "ab");
  EXPECT_EQ(filter.Push("N"), "");
  EXPECT_EQ(filter.Push("x"), "ENx");
  EXPECT_FALSE(filter.stopped());
}

TEST(StopStringFilterTest, StopSpanningPiecesCutsBeforeIt) {
  StopStringFilter filter({"END"});
  EXPECT_EQ(PushAll(filter, {"hello E", "N", "D and more"}),
            (std::vector<std::string>{"hello ", "", ""}));
  EXPECT_TRUE(filter.stopped());
  EXPECT_EQ(filter.Push("later"), "");
  EXPECT_EQ(filter.Flush(), "");
}

TEST(StopStringFilterTest, EarliestOfSeveralStopsWins) {
  StopStringFilter filter({"yz", "b"});
  EXPECT_EQ(filter.Push("axyzb"), "ax");
  EXPECT_TRUE(filter.stopped());
}

TEST(StopStringFilterTest, OverlappingPrefixesHoldTheLongestCandidate) {
  StopStringFilter filter({"aab"});
  EXPECT_EQ(filter.Push("xaa"), "x");
  EXPECT_EQ(filter.Push("a"), "a");  // "aaa": only the last "aa" can still start "aab"
  EXPECT_EQ(filter.Push("b"), "");
  EXPECT_TRUE(filter.stopped());
}

TEST(StopStringFilterTest, FlushReleasesHeldText) {
  StopStringFilter filter({"stop"});
  EXPECT_EQ(filter.Push("go st"), "go ");
  EXPECT_EQ(filter.Flush(), "st");
}

TEST(StopStringFilterTest, MultiByteStopCutsOnCharacterBoundaries) {
  StopStringFilter filter({"é!"});
  EXPECT_EQ(filter.Push("caf\xC3\xA9"), "caf");
  EXPECT_EQ(filter.Push("?"), "\xC3\xA9?");
  EXPECT_EQ(filter.Push("\xC3\xA9!"), "");
  EXPECT_TRUE(filter.stopped());
}

TEST(StopStringFilterTest, EmptyStopStringsAreIgnored) {
  StopStringFilter filter({""});
  EXPECT_EQ(filter.Push("abc"), "abc");
  EXPECT_FALSE(filter.stopped());
}

}  // namespace
}  // namespace tpserve
