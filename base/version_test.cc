#include "base/version.h"

#include <cstring>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tpserve {
namespace {

TEST(VersionTest, NamesProgramReleaseRevisionAndBuild) {
  const std::string text = VersionText("tpserve");
  EXPECT_THAT(text, testing::StartsWith(std::string("tpserve ") + TpserveVersion() + " (git "));
  EXPECT_THAT(text, testing::ContainsRegex(" (opt|fastbuild|dbg) build, "));
  // A stamped build from a checkout knows its revision; "unknown" otherwise.
  const std::string rev = GitRevision();
  EXPECT_TRUE(rev == "unknown" || testing::Value(rev, testing::MatchesRegex("[0-9a-f]{12}")))
      << rev;
}

}  // namespace
}  // namespace tpserve
