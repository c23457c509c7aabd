#include "base/subprocess.h"

#include <signal.h>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

TEST(SubprocessTest, ReportsExitCodes) {
  auto a = Spawn({"/bin/sh", "-c", "exit 0"});
  auto b = Spawn({"/bin/sh", "-c", "exit 3"});
  ASSERT_TRUE(a.ok() && b.ok());
  auto exits = WaitAllOrKill({*a, *b}, absl::Seconds(1));
  EXPECT_EQ(exits[0].exit_code, 0);
  EXPECT_EQ(exits[1].exit_code, 3);
}

TEST(SubprocessTest, OneFailureKillsTheRest) {
  auto sleeper = Spawn({"/bin/sleep", "60"});
  auto failer = Spawn({"/bin/sh", "-c", "exit 1"});
  ASSERT_TRUE(sleeper.ok() && failer.ok());
  const absl::Time start = absl::Now();
  auto exits = WaitAllOrKill({*sleeper, *failer}, absl::Seconds(1));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(exits[0].signal, SIGTERM);
  EXPECT_EQ(exits[1].exit_code, 1);
}

TEST(SubprocessTest, MissingBinaryExits127) {
  auto p = Spawn({"/nonexistent/binary"});
  ASSERT_TRUE(p.ok());
  auto exits = WaitAllOrKill({*p}, absl::Seconds(1));
  EXPECT_EQ(exits[0].exit_code, 127);
}

}  // namespace
}  // namespace tpserve
