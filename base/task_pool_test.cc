#include "base/task_pool.h"

#include <atomic>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace tpserve {
namespace {

TEST(TaskPoolTest, RunsEveryTaskAndTheDestructorDrainsTheQueue) {
  std::atomic<int> ran{0};
  {
    TaskPool pool(2, 100);
    for (int i = 0; i < 100; ++i) ASSERT_TRUE(pool.TrySubmit([&] { ran.fetch_add(1); }));
  }
  EXPECT_EQ(ran.load(), 100);
}

TEST(TaskPoolTest, AFullQueueRefusesInsteadOfGrowing) {
  absl::Notification release;
  absl::Notification started;
  TaskPool pool(1, 2);
  ASSERT_TRUE(pool.TrySubmit([&] {
    started.Notify();
    release.WaitForNotification();
  }));
  started.WaitForNotification();  // the one thread is busy; the queue holds two
  EXPECT_TRUE(pool.TrySubmit([] {}));
  EXPECT_TRUE(pool.TrySubmit([] {}));
  EXPECT_FALSE(pool.TrySubmit([] {}));
  release.Notify();
}

}  // namespace
}  // namespace tpserve
