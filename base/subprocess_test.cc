#include "base/subprocess.h"

#include <signal.h>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

TEST(SubprocessTest, ReportsExitCodes) {
  auto a = Spawn({"/bin/sh", "-c", "exit 0"});
  // Later than a: a failure reaped first would (rightly) get a killed before it exits.
  auto b = Spawn({"/bin/sh", "-c", "sleep 0.3; exit 3"});
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

TEST(SubprocessTest, TerminateAndReapEscalates) {
  auto quick = Spawn({"/bin/sh", "-c", "exit 4"});
  auto sleeper = Spawn({"/bin/sleep", "60"});
  // Ignores SIGTERM: only SIGKILL ends it.
  auto stubborn = Spawn({"/bin/sh", "-c", "trap '' TERM; while :; do sleep 0.05; done"});
  ASSERT_TRUE(quick.ok() && sleeper.ok() && stubborn.ok());
  const absl::Time start = absl::Now();
  auto exits = TerminateAndReap({*quick, *sleeper, *stubborn}, absl::Milliseconds(300));
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  EXPECT_EQ(exits[0].exit_code, 4);
  EXPECT_EQ(exits[1].signal, SIGTERM);
  EXPECT_EQ(exits[2].signal, SIGKILL);
  EXPECT_EQ(DescribeExit(exits[2]), "signal 9");
  ASSERT_TRUE(PollChild(*quick).has_value());  // reaped already: nothing to wait for
  EXPECT_EQ(PollChild(*quick)->exit_code, -1);
}

TEST(SubprocessTest, ProcessHasExitedSeesZombiesAndGoneProcesses) {
  EXPECT_FALSE(ProcessHasExited(getpid()));
  auto quick = Spawn({"/bin/sh", "-c", "exit 0"});
  ASSERT_TRUE(quick.ok());
  absl::SleepFor(absl::Milliseconds(200));  // exited, not reaped: a zombie
  EXPECT_TRUE(ProcessHasExited(*quick));
  auto sleeper = Spawn({"/bin/sleep", "60"});
  ASSERT_TRUE(sleeper.ok());
  EXPECT_FALSE(ProcessHasExited(*sleeper));
  TerminateAndReap({*quick, *sleeper}, absl::Milliseconds(100));
  EXPECT_TRUE(ProcessHasExited(*sleeper));  // reaped: gone
}

TEST(SubprocessTest, MissingBinaryExits127) {
  auto p = Spawn({"/nonexistent/binary"});
  ASSERT_TRUE(p.ok());
  auto exits = WaitAllOrKill({*p}, absl::Seconds(1));
  EXPECT_EQ(exits[0].exit_code, 127);
}

}  // namespace
}  // namespace tpserve
