#include "base/fifo_testing.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <thread>

#include "absl/synchronization/notification.h"

namespace tpserve {

bool MakeFifo(const std::string& path) {
  ::unlink(path.c_str());
  return ::mkfifo(path.c_str(), 0644) == 0;
}

bool ReturnsWithin(absl::Duration timeout, const std::string& fifo,
                   const std::function<void()>& call) {
  absl::Notification returned;
  std::thread caller([&] {
    call();
    returned.Notify();
  });
  const bool in_time = returned.WaitForNotificationWithTimeout(timeout);
  // A reader blocked in open() lets a non-blocking writer in; the writer's close then
  // ends its read() with end-of-file. Repeated in case the reader was not there yet.
  while (!returned.WaitForNotificationWithTimeout(absl::Milliseconds(50))) {
    const int writer = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (writer >= 0) ::close(writer);
  }
  caller.join();
  return in_time;
}

}  // namespace tpserve
