#include "server/http/connection_pool.h"

#include <utility>

namespace tpserve {

void ConnectionPool::enqueue(std::function<void()> task) {
  {
    absl::MutexLock lock(&mu_);
    // Each task waiting in tasks_ has an idle thread of its own, or a new one.
    if (idle_ > tasks_.size()) {
      tasks_.push_back(std::move(task));
      return;
    }
    if (!shutting_down_ && threads_.size() < max_threads_) {
      tasks_.push_back(std::move(task));
      threads_.emplace_back(&ConnectionPool::Work, this);
      return;
    }
  }
  task();  // Every thread is busy: the caller runs it (HttpServer refuses the connection).
}

void ConnectionPool::shutdown() {
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    shutting_down_ = true;
    threads.swap(threads_);
  }
  for (std::thread& thread : threads) thread.join();
}

size_t ConnectionPool::threads() const {
  absl::MutexLock lock(&mu_);
  return threads_.size();
}

size_t ConnectionPool::idle_threads() const {
  absl::MutexLock lock(&mu_);
  return idle_;
}

void ConnectionPool::Work() {
  absl::MutexLock lock(&mu_);
  const auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !tasks_.empty() || shutting_down_;
  };
  while (true) {
    ++idle_;
    mu_.Await(absl::Condition(&ready));
    --idle_;
    if (tasks_.empty()) return;  // Shutting down, and every task handed over has run.
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    mu_.Unlock();
    task();
    task = nullptr;  // What the task holds goes before the lock is taken again.
    mu_.Lock();
  }
}

}  // namespace tpserve
