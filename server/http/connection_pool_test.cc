#include "server/http/connection_pool.h"

#include <atomic>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace tpserve {
namespace {

TEST(ConnectionPoolTest, EachBusyTaskGetsAThreadUpToTheLimitThenTheCallerRunsIt) {
  ConnectionPool pool(3);
  absl::Notification release;
  std::atomic<int> on_pool{0};
  const std::thread::id caller = std::this_thread::get_id();
  for (int i = 0; i < 3; ++i) {
    pool.enqueue([&] {
      if (std::this_thread::get_id() != caller) ++on_pool;
      release.WaitForNotification();
    });
  }
  EXPECT_EQ(pool.threads(), 3u);
  bool ran_here = false;
  pool.enqueue([&] { ran_here = std::this_thread::get_id() == caller; });
  EXPECT_TRUE(ran_here);  // all three threads are busy
  release.Notify();
  pool.shutdown();
  EXPECT_EQ(on_pool, 3);
}

TEST(ConnectionPoolTest, IdleThreadsAreReused) {
  ConnectionPool pool(8);
  std::atomic<int> done{0};
  for (int i = 0; i < 20; ++i) {
    pool.enqueue([&] { ++done; });
    // One task at a time, each after the thread of the last is idle again.
    while (done <= i || pool.idle_threads() != 1) absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(pool.threads(), 1u);
}

TEST(ConnectionPoolTest, ShutdownRunsTheTasksHandedOverAndJoins) {
  std::atomic<int> done{0};
  {
    ConnectionPool pool(4);
    for (int i = 0; i < 4; ++i) {
      pool.enqueue([&] {
        absl::SleepFor(absl::Milliseconds(50));
        ++done;
      });
    }
  }  // The destructor shuts down.
  EXPECT_EQ(done, 4);
}

}  // namespace
}  // namespace tpserve
