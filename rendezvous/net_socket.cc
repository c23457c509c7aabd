#include "rendezvous/net_socket.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace tpserve {
namespace {

absl::Status ErrnoStatus(absl::string_view what, int err) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(err)));
}

// Waits until `fd` is ready for `events`; DEADLINE_EXCEEDED at the deadline.
absl::Status PollUntil(int fd, short events, absl::Time deadline) {
  while (true) {
    int timeout_ms = -1;
    if (deadline != absl::InfiniteFuture()) {
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) return absl::DeadlineExceededError("socket timed out");
      timeout_ms = static_cast<int>(absl::ToInt64Milliseconds(absl::Ceil(
          std::min(left, absl::Hours(1)), absl::Milliseconds(1))));
    }
    pollfd pfd{fd, events, 0};
    const int n = poll(&pfd, 1, timeout_ms);
    if (n > 0) return absl::OkStatus();  // Errors and hang-ups surface in send/recv.
    if (n < 0 && errno != EINTR) return ErrnoStatus("poll", errno);
  }
}

absl::Status RecvExactly(int fd, char* buf, size_t len, absl::Time deadline) {
  size_t got = 0;
  while (got < len) {
    TPSERVE_RETURN_IF_ERROR(PollUntil(fd, POLLIN, deadline));
    const ssize_t n = recv(fd, buf + got, len - got, MSG_DONTWAIT);
    if (n == 0) return absl::UnavailableError("connection closed by peer");
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      return ErrnoStatus("recv", errno);
    }
    got += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status SendExactly(int fd, const char* buf, size_t len, absl::Time deadline) {
  size_t sent = 0;
  while (sent < len) {
    TPSERVE_RETURN_IF_ERROR(PollUntil(fd, POLLOUT, deadline));
    const ssize_t n = send(fd, buf + sent, len - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      return ErrnoStatus("send", errno);
    }
    sent += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

using AddrInfoPtr = std::unique_ptr<addrinfo, decltype(&freeaddrinfo)>;

absl::StatusOr<AddrInfoPtr> Resolve(const std::string& host, int port, bool passive) {
  if (port < 0 || port > 65535) return absl::InvalidArgumentError(absl::StrCat("bad port ", port));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* result = nullptr;
  const std::string service = absl::StrCat(port);
  const int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints,
                             &result);
  if (rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve '", host, "': ", gai_strerror(rc)));
  }
  return AddrInfoPtr(result, &freeaddrinfo);
}

// One non-blocking connect attempt, bounded by `deadline`; returns the socket's errno
// as the status message on failure.
absl::StatusOr<UniqueFd> ConnectOnce(const addrinfo& ai, absl::Time deadline) {
  UniqueFd fd(socket(ai.ai_family, ai.ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                     ai.ai_protocol));
  if (!fd.valid()) return ErrnoStatus("socket", errno);
  if (connect(fd.get(), ai.ai_addr, ai.ai_addrlen) != 0) {
    if (errno != EINPROGRESS) return ErrnoStatus("connect", errno);
    TPSERVE_RETURN_IF_ERROR(PollUntil(fd.get(), POLLOUT, deadline));
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return ErrnoStatus("connect", err);
  }
  const int one = 1;
  setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

}  // namespace

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) reset(other.release());
  return *this;
}

int UniqueFd::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) close(fd_);
  fd_ = fd;
}

void UniqueFd::ShutdownBoth() const {
  if (fd_ >= 0) shutdown(fd_, SHUT_RDWR);
}

absl::StatusOr<UniqueFd> ListenTcp(const std::string& host, int port) {
  TPSERVE_ASSIGN_OR_RETURN(AddrInfoPtr addrs, Resolve(host, port, /*passive=*/true));
  absl::Status last = absl::UnavailableError(absl::StrCat("no address for '", host, "'"));
  for (const addrinfo* ai = addrs.get(); ai != nullptr; ai = ai->ai_next) {
    UniqueFd fd(socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
    if (!fd.valid()) {
      last = ErrnoStatus("socket", errno);
      continue;
    }
    const int one = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd.get(), 128) != 0) {
      last = ErrnoStatus(absl::StrCat("bind/listen on ", host, ":", port), errno);
      continue;
    }
    return fd;
  }
  return last;
}

absl::StatusOr<int> BoundPort(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return ErrnoStatus("getsockname", errno);
  }
  if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  if (addr.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  }
  return absl::InternalError("unexpected address family");
}

absl::StatusOr<UniqueFd> ConnectTcp(const std::string& host, int port, absl::Time deadline) {
  TPSERVE_ASSIGN_OR_RETURN(AddrInfoPtr addrs, Resolve(host, port, /*passive=*/false));
  absl::Status last;
  do {
    for (const addrinfo* ai = addrs.get(); ai != nullptr; ai = ai->ai_next) {
      absl::StatusOr<UniqueFd> fd = ConnectOnce(*ai, deadline);
      if (fd.ok()) return fd;
      last = fd.status();
    }
    absl::SleepFor(absl::Milliseconds(50));
  } while (absl::Now() < deadline);
  return absl::UnavailableError(
      absl::StrCat("cannot connect to ", host, ":", port, ": ", last.message()));
}

absl::Status SendFrame(int fd, absl::string_view body, absl::Time deadline) {
  if (body.size() > UINT32_MAX) return absl::InvalidArgumentError("frame too large");
  const uint32_t n = static_cast<uint32_t>(body.size());
  const char header[4] = {static_cast<char>(n), static_cast<char>(n >> 8),
                          static_cast<char>(n >> 16), static_cast<char>(n >> 24)};
  TPSERVE_RETURN_IF_ERROR(SendExactly(fd, header, sizeof(header), deadline));
  return SendExactly(fd, body.data(), body.size(), deadline);
}

absl::StatusOr<std::string> RecvFrame(int fd, size_t max_body, absl::Time deadline) {
  unsigned char header[4];
  TPSERVE_RETURN_IF_ERROR(RecvExactly(fd, reinterpret_cast<char*>(header), 4, deadline));
  const size_t n = header[0] | header[1] << 8 | header[2] << 16 |
                   static_cast<size_t>(header[3]) << 24;
  if (n > max_body) {
    return absl::InvalidArgumentError(absl::StrCat("frame of ", n, " bytes exceeds ", max_body));
  }
  // Grow as bytes arrive, so a peer that only announces a large frame costs little.
  constexpr size_t kChunk = 1 << 20;
  std::string body;
  while (body.size() < n) {
    const size_t old = body.size();
    body.resize(std::min(n, old + kChunk));
    TPSERVE_RETURN_IF_ERROR(RecvExactly(fd, body.data() + old, body.size() - old, deadline));
  }
  return body;
}

absl::StatusOr<std::string> LocalAddressToward(const std::string& host, int port) {
  // Resolved as for a TCP connect; the route is the same for the UDP socket asked here.
  TPSERVE_ASSIGN_OR_RETURN(const AddrInfoPtr addresses, Resolve(host, port, /*passive=*/false));
  absl::Status last = absl::UnavailableError(absl::StrCat("no address of '", host, "'"));
  for (const addrinfo* ai = addresses.get(); ai != nullptr; ai = ai->ai_next) {
    UniqueFd fd(socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!fd.valid() || connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      last = ErrnoStatus(absl::StrCat("route to ", host), errno);
      continue;
    }
    sockaddr_storage local{};
    socklen_t length = sizeof(local);
    if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &length) != 0) {
      last = ErrnoStatus("getsockname", errno);
      continue;
    }
    char text[INET6_ADDRSTRLEN] = {};
    const void* raw = local.ss_family == AF_INET6
                          ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr)
                          : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr);
    if (inet_ntop(local.ss_family, raw, text, sizeof(text)) == nullptr) {
      last = ErrnoStatus("inet_ntop", errno);
      continue;
    }
    return std::string(text);
  }
  return last;
}

}  // namespace tpserve
