// TaskPool: a fixed set of threads running queued tasks, with a bounded queue, for work
// that must not run where it arrives (an HTTP I/O thread must not tokenize a long
// prompt). TrySubmit refuses a task (returns false) when the queue is full, so a burst
// is pushed back to its callers instead of growing memory. The destructor runs the
// tasks already queued, then joins. Thread-safe.
#ifndef TPSERVE_BASE_TASK_POOL_H_
#define TPSERVE_BASE_TASK_POOL_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace tpserve {

class TaskPool {
 public:
  // threads ≥ 1; max_queued ≥ 1: tasks waiting for a thread.
  TaskPool(size_t threads, size_t max_queued);
  ~TaskPool();
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

  bool TrySubmit(std::function<void()> task);

 private:
  void Run();

  const size_t max_queued_;
  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace tpserve

#endif  // TPSERVE_BASE_TASK_POOL_H_
