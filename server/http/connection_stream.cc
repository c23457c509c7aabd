#include "server/http/connection_stream.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/time/clock.h"

namespace tpserve {
namespace {

constexpr size_t kReadChunkBytes = 16 * 1024;
constexpr absl::Duration kLingerTime = absl::Milliseconds(500);
constexpr size_t kLingerBytes = 64 * 1024;

// The numeric address of one end of a connected socket; left as is on failure.
void Address(int fd, bool peer, std::string& ip, int& port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  auto* sa = reinterpret_cast<sockaddr*>(&addr);
  if ((peer ? getpeername(fd, sa, &len) : getsockname(fd, sa, &len)) != 0) return;
  char host[NI_MAXHOST];
  char service[NI_MAXSERV];
  if (getnameinfo(sa, len, host, sizeof(host), service, sizeof(service),
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return;
  }
  ip = host;
  port = std::atoi(service);
}

}  // namespace

bool ConnectionStream::WaitForRequest(absl::Time deadline) {
  return buffer_pos_ < buffer_.size() || Fill(deadline) > 0;
}

void ConnectionStream::Linger() {
  shutdown(fd_, SHUT_WR);  // The client sees the end of the last response now.
  const absl::Time deadline = absl::Now() + kLingerTime;
  for (size_t dropped = 0; dropped < kLingerBytes;) {
    buffer_pos_ = buffer_.size();
    const ssize_t n = Fill(deadline);
    if (n <= 0) return;
    dropped += static_cast<size_t>(n);
  }
}

bool ConnectionStream::is_readable() const {
  return buffer_pos_ < buffer_.size() || WaitFor(POLLIN, read_deadline_) == Wait::kReady;
}

bool ConnectionStream::is_writable() const {
  return WaitFor(POLLOUT, absl::Now() + write_timeout_) == Wait::kReady;
}

ssize_t ConnectionStream::read(char* ptr, size_t size) {
  if (read_left_ == 0) return -1;
  if (buffer_pos_ == buffer_.size()) {
    const ssize_t n = Fill(read_deadline_);
    if (n <= 0) return n;
  }
  const size_t n = std::min({size, buffer_.size() - buffer_pos_, read_left_});
  read_left_ -= n;
  std::memcpy(ptr, buffer_.data() + buffer_pos_, n);
  buffer_pos_ += n;
  return static_cast<ssize_t>(n);
}

ssize_t ConnectionStream::write(const char* ptr, size_t size) {
  const absl::Time deadline = absl::Now() + write_timeout_;
  while (true) {
    // MSG_NOSIGNAL: a client that hung up is EPIPE here, not SIGPIPE for the process.
    const ssize_t n = send(fd_, ptr, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) return n;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
    if (WaitFor(POLLOUT, deadline) != Wait::kReady) return -1;
  }
}

void ConnectionStream::get_remote_ip_and_port(std::string& ip, int& port) const {
  Address(fd_, /*peer=*/true, ip, port);
}

void ConnectionStream::get_local_ip_and_port(std::string& ip, int& port) const {
  Address(fd_, /*peer=*/false, ip, port);
}

ConnectionStream::Wait ConnectionStream::WaitFor(short events, absl::Time deadline) const {
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return Wait::kTimedOut;
    const int timeout_ms =
        static_cast<int>(absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))));
    pollfd fds[2] = {{fd_, events, 0}, {wake_fd_, POLLIN, 0}};
    const int n = poll(fds, 2, timeout_ms);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || fds[1].revents != 0) return Wait::kStopping;  // Or cannot wait: give up.
    if (fds[0].revents != 0) return Wait::kReady;  // Errors and hang-ups surface in recv/send.
  }
}

ssize_t ConnectionStream::Fill(absl::Time deadline) {
  // Polling first, even with input waiting, checks the deadline and a stop on every
  // chunk: a client that sends fast and never ends its head is cut off too.
  while (WaitFor(POLLIN, deadline) == Wait::kReady) {
    buffer_.resize(kReadChunkBytes);
    buffer_pos_ = 0;
    const ssize_t n = recv(fd_, buffer_.data(), buffer_.size(), MSG_DONTWAIT);
    buffer_.resize(n > 0 ? static_cast<size_t>(n) : 0);
    if (n >= 0 || (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) return n;
  }
  return -1;
}

}  // namespace tpserve
