#include "server/http/http_server.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"

namespace tpserve {
namespace {

constexpr size_t kMaxHeadBytes = 8 * 1024;
constexpr absl::Duration kReadTimeout = absl::Seconds(2);   // the whole request head
constexpr absl::Duration kWriteTimeout = absl::Seconds(2);  // the whole response
constexpr absl::Duration kDrainTimeout = absl::Milliseconds(500);
constexpr size_t kMaxDrainBytes = 64 * 1024;

// "127.0.0.1:9090", "[::]:9090".
std::string Address(const std::string& host, int port) {
  return absl::StrContains(host, ':') ? absl::StrCat("[", host, "]:", port)
                                      : absl::StrCat(host, ":", port);
}

absl::Status ListenError(const std::string& address, absl::string_view call, int err) {
  return absl::UnavailableError(
      absl::StrCat("cannot listen on ", address, ": ", call, ": ", std::strerror(err)));
}

// A non-blocking listening socket on the first of host's addresses that binds.
absl::StatusOr<int> Listen(const std::string& host, int port) {
  const std::string address = Address(host, port);
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("cannot listen on ", address, ": bad port"));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* addrs = nullptr;
  const std::string service = absl::StrCat(port);
  if (const int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &addrs); rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot listen on ", address, ": ", gai_strerror(rc)));
  }
  absl::Status last = absl::UnavailableError(absl::StrCat("no address for ", address));
  for (const addrinfo* ai = addrs; ai != nullptr; ai = ai->ai_next) {
    const int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
      last = ListenError(address, "socket", errno);
      continue;
    }
    const int one = 1;  // A restart must not wait out the last run's TIME_WAIT sockets.
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    const char* failed = bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 ? "bind"
                         : listen(fd, 16) != 0                      ? "listen"
                                                                    : nullptr;
    if (failed == nullptr) {
      freeaddrinfo(addrs);
      return fd;
    }
    last = ListenError(address, failed, errno);
    close(fd);
  }
  freeaddrinfo(addrs);
  return last;
}

absl::StatusOr<int> BoundPort(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return absl::InternalError(absl::StrCat("getsockname: ", std::strerror(errno)));
  }
  const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&addr);
  const auto* in4 = reinterpret_cast<const sockaddr_in*>(&addr);
  return ntohs(addr.ss_family == AF_INET6 ? in6->sin6_port : in4->sin_port);
}

absl::string_view ReasonPhrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 204:
      return "No Content";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "";  // The reason phrase may be empty (RFC 9112 §4).
  }
}

HttpResponse PlainText(int status, absl::string_view text) {
  HttpResponse response;
  response.status = status;
  response.body = absl::StrCat(text, "\n");
  return response;
}

bool IsToken(absl::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           std::strchr("!#$%&'*+-.^_`|~", c) != nullptr;
  });
}

// An origin-form target ("/path?query"): printable ASCII, no spaces.
bool IsOriginForm(absl::string_view s) {
  return absl::StartsWith(s, "/") &&
         std::all_of(s.begin(), s.end(), [](char c) { return c > ' ' && c < 0x7f; });
}

}  // namespace

struct HttpServer::Reply {
  HttpResponse response;
  bool send_body = true;
  std::string extra_headers;  // each line ends in "\r\n"

  std::string Serialize() const {
    std::string out = absl::StrCat("HTTP/1.1 ", response.status, " ", ReasonPhrase(response.status),
                                   "\r\nContent-Type: ", response.content_type,
                                   "\r\nContent-Length: ", response.body.size(), "\r\n",
                                   extra_headers, "Connection: close\r\n\r\n");
    if (send_body) out += response.body;
    return out;
  }
};

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& host, int port,
                                                              HttpHandler handler) {
  if (!handler) return absl::InvalidArgumentError("HttpServer needs a handler");
  // The destructor closes whatever was opened if a later step fails.
  std::unique_ptr<HttpServer> server(new HttpServer(std::move(handler)));
  TPSERVE_ASSIGN_OR_RETURN(server->listen_fd_, Listen(host, port));
  TPSERVE_ASSIGN_OR_RETURN(server->port_, BoundPort(server->listen_fd_));
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe2: ", std::strerror(errno)));
  }
  server->wake_read_ = pipe_fds[0];
  server->wake_write_ = pipe_fds[1];
  server->thread_ = std::thread(&HttpServer::AcceptLoop, server.get());
  return server;
}

HttpServer::~HttpServer() {
  if (thread_.joinable()) {
    const char byte = 0;
    while (write(wake_write_, &byte, 1) < 0 && errno == EINTR) {
    }
    thread_.join();
  }
  for (const int fd : {listen_fd_, wake_read_, wake_write_}) {
    if (fd >= 0) close(fd);
  }
}

void HttpServer::AcceptLoop() {
  while (WaitFor(listen_fd_, POLLIN, absl::InfiniteFuture()) == Wait::kReady) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      Serve(fd);
      close(fd);
    } else if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) {
      absl::SleepFor(absl::Milliseconds(10));  // E.g. out of fds: do not spin.
    }
  }
}

void HttpServer::Serve(int fd) {
  std::string head;
  Reply reply;
  switch (ReadHead(fd, absl::Now() + kReadTimeout, &head)) {
    case Head::kAbandoned:
      return;
    case Head::kTooLarge:
      reply.response = PlainText(431, "request head over 8 KiB");
      break;
    case Head::kComplete:
      reply = Dispatch(head);
      break;
  }
  if (SendAll(fd, reply.Serialize(), absl::Now() + kWriteTimeout)) DrainBeforeClose(fd);
}

HttpServer::Head HttpServer::ReadHead(int fd, absl::Time deadline, std::string* head) {
  char buf[2048];
  while (true) {
    if (absl::StrContains(*head, "\r\n\r\n")) return Head::kComplete;
    if (head->size() >= kMaxHeadBytes) return Head::kTooLarge;
    if (WaitFor(fd, POLLIN, deadline) != Wait::kReady) return Head::kAbandoned;
    const ssize_t n = recv(fd, buf, std::min(sizeof(buf), kMaxHeadBytes - head->size()), 0);
    if (n == 0) return Head::kAbandoned;
    if (n < 0 && errno != EINTR && errno != EAGAIN) return Head::kAbandoned;
    if (n > 0) head->append(buf, static_cast<size_t>(n));
  }
}

HttpServer::Reply HttpServer::Dispatch(absl::string_view head) {
  // "METHOD SP target SP HTTP-version"; header fields are not needed and not parsed.
  const std::vector<absl::string_view> parts =
      absl::StrSplit(head.substr(0, head.find("\r\n")), ' ');
  if (parts.size() != 3 || !IsToken(parts[0]) || !IsOriginForm(parts[1]) ||
      (parts[2] != "HTTP/1.1" && parts[2] != "HTTP/1.0")) {
    return {PlainText(400, "malformed request line"), true, ""};
  }
  const absl::string_view method = parts[0];
  if (method != "GET" && method != "HEAD") {
    return {PlainText(405, "only GET and HEAD are served"), true, "Allow: GET, HEAD\r\n"};
  }
  const absl::string_view path = parts[1].substr(0, parts[1].find_first_of("?#"));
  Reply reply{handler_(path), method == "GET", ""};
  const HttpResponse& r = reply.response;
  if (r.status < 200 || r.status > 599 ||
      r.content_type.find_first_of("\r\n") != std::string::npos) {
    reply.response = PlainText(500, "the handler returned an invalid response");
  }
  return reply;
}

bool HttpServer::SendAll(int fd, absl::string_view data, absl::Time deadline) {
  while (!data.empty()) {
    // MSG_NOSIGNAL: a client that hung up is EPIPE here, not SIGPIPE for the process.
    const ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
    } else if (n < 0 && errno != EINTR &&
               (errno != EAGAIN || WaitFor(fd, POLLOUT, deadline) != Wait::kReady)) {
      return false;
    }
  }
  return true;
}

void HttpServer::DrainBeforeClose(int fd) {
  shutdown(fd, SHUT_WR);  // The client sees the end of the response now.
  const absl::Time deadline = absl::Now() + kDrainTimeout;
  char buf[4096];
  for (size_t drained = 0; drained < kMaxDrainBytes;) {
    if (WaitFor(fd, POLLIN, deadline) != Wait::kReady) return;
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) return;
    if (n > 0) drained += static_cast<size_t>(n);
  }
}

HttpServer::Wait HttpServer::WaitFor(int fd, short events, absl::Time deadline) {
  while (true) {
    int timeout_ms = -1;
    if (deadline != absl::InfiniteFuture()) {
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) return Wait::kTimedOut;
      timeout_ms =
          static_cast<int>(absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))));
    }
    pollfd fds[2] = {{fd, events, 0}, {wake_read_, POLLIN, 0}};
    const int n = poll(fds, 2, timeout_ms);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || fds[1].revents != 0) return Wait::kStopping;  // Or cannot wait: give up.
    if (fds[0].revents != 0) return Wait::kReady;  // Errors and hang-ups surface in recv/send.
  }
}

}  // namespace tpserve
