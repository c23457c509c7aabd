// ConnectionPool: the task queue that cpp-httplib's accept loop hands each accepted
// connection to (httplib::TaskQueue), for HttpServer.
//
// Every connection runs on a thread of its own, so a slow or idle client never delays
// another: an idle thread of the pool takes it, else a new thread starts while there
// are fewer than max_threads. When all max_threads are busy, enqueue() runs the task on
// the calling thread (the accept thread) instead of queueing it behind connections that
// may take seconds; HttpServer recognises that thread and closes such a connection at
// once. Threads start as connections need them and stay until shutdown().
//
// Threading: enqueue() and shutdown() are called by the accept thread (cpp-httplib's
// listen loop), which also owns and deletes the pool. shutdown() lets the threads
// finish the tasks already handed to them, then joins every thread.
#ifndef TPSERVE_SERVER_HTTP_CONNECTION_POOL_H_
#define TPSERVE_SERVER_HTTP_CONNECTION_POOL_H_

#include <httplib.h>

#include <cstddef>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace tpserve {

class ConnectionPool final : public httplib::TaskQueue {
 public:
  explicit ConnectionPool(size_t max_threads) : max_threads_(max_threads) {}
  ~ConnectionPool() override { shutdown(); }
  ConnectionPool(const ConnectionPool&) = delete;
  ConnectionPool& operator=(const ConnectionPool&) = delete;

  void enqueue(std::function<void()> task) override;
  void shutdown() override;

  size_t threads() const;       // started
  size_t idle_threads() const;  // waiting for a task

 private:
  void Work();

  const size_t max_threads_;
  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);  // handed over, not started
  size_t idle_ ABSL_GUARDED_BY(mu_) = 0;                          // threads waiting for a task
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_HTTP_CONNECTION_POOL_H_
