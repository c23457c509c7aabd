#include "base/spin_wait.h"

#include <atomic>
#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace tpserve {
namespace {

SpinWaitOptions Quick() {
  SpinWaitOptions o;
  o.spins = 10;
  o.yields = 10;
  o.check_every = absl::Milliseconds(1);
  return o;
}

TEST(SpinWaitTest, EndsWhenDoneWithoutAskingFailure) {
  std::atomic<bool> flag{false};
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(20));
    flag = true;
  });
  const absl::Status s = SpinWait([&] { return flag.load(); }, [] { return absl::OkStatus(); });
  setter.join();
  EXPECT_TRUE(s.ok()) << s;
}

TEST(SpinWaitTest, AFailureSeenWhileNotDoneEndsTheWait) {
  int asked = 0;
  const absl::Status s =
      SpinWait([] { return false; },
               [&] {
                 ++asked;
                 return asked < 3 ? absl::OkStatus() : absl::UnavailableError("peer exited");
               },
               Quick());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(asked, 3);
}

TEST(SpinWaitTest, DoneBecomingTrueAsTheFailureIsSeenIsNotAFailure) {
  bool done = false;
  // The peer completes the wait and leaves between the last look at done() and the
  // failure check: the wait ends well.
  const absl::Status s = SpinWait([&] { return done; },
                                  [&] {
                                    done = true;
                                    return absl::UnavailableError("peer exited");
                                  },
                                  Quick());
  EXPECT_TRUE(s.ok()) << s;
}

}  // namespace
}  // namespace tpserve
