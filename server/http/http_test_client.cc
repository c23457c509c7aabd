#include "server/http/http_test_client.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

namespace tpserve {
namespace {

sockaddr_in Loopback(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return addr;
}

// The status line and headers in `head` (without its final CRLF CRLF).
bool ParseHead(absl::string_view head, RawHttpResponse* r) {
  const std::vector<absl::string_view> lines = absl::StrSplit(head, "\r\n");
  if (!absl::StartsWith(lines[0], "HTTP/1.") || lines[0].size() < 12 ||
      !absl::SimpleAtoi(lines[0].substr(9, 3), &r->status)) {
    return false;
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::vector<absl::string_view> kv = absl::StrSplit(lines[i], absl::MaxSplits(':', 1));
    if (kv.size() == 2) {
      r->headers[absl::AsciiStrToLower(kv[0])] = std::string(absl::StripAsciiWhitespace(kv[1]));
    }
  }
  return true;
}

}  // namespace

std::string RawHttpResponse::header(const std::string& lower_name) const {
  auto it = headers.find(lower_name);
  return it == headers.end() ? "" : it->second;
}

RawHttpConnection::RawHttpConnection(int port, absl::Duration timeout, int receive_buffer)
    : fd_(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
  const timeval tv = absl::ToTimeval(timeout);
  setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (receive_buffer > 0) {
    setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof(receive_buffer));
  }
  const sockaddr_in addr = Loopback(port);
  connected_ = connect(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0;
}

RawHttpConnection::~RawHttpConnection() { Close(); }

bool RawHttpConnection::Send(absl::string_view data) {
  return send(fd_, data.data(), data.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(data.size());
}

bool RawHttpConnection::Receive() {
  char buf[16384];
  ssize_t n;
  do {
    n = recv(fd_, buf, sizeof(buf), 0);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) return false;
  buffer_.append(buf, static_cast<size_t>(n));
  return true;
}

std::optional<std::string> RawHttpConnection::ReadLine() {
  size_t end;
  while ((end = buffer_.find("\r\n")) == std::string::npos) {
    if (!Receive()) return std::nullopt;
  }
  std::string line = buffer_.substr(0, end);
  buffer_.erase(0, end + 2);
  return line;
}

bool RawHttpConnection::ReadBytes(size_t count, std::string* out) {
  while (buffer_.size() < count) {
    if (!Receive()) return false;
  }
  out->append(buffer_, 0, count);
  buffer_.erase(0, count);
  return true;
}

RawHttpResponse RawHttpConnection::ReadHead() {
  RawHttpResponse r;
  size_t end;
  while ((end = buffer_.find("\r\n\r\n")) == std::string::npos) {
    if (!Receive()) return r;
  }
  if (!ParseHead(absl::string_view(buffer_).substr(0, end), &r)) r.status = 0;
  buffer_.erase(0, end + 4);
  return r;
}

std::optional<std::string> RawHttpConnection::ReadChunk() {
  const std::optional<std::string> size_line = ReadLine();
  size_t size = 0;
  if (!size_line || !absl::SimpleHexAtoi(*size_line, &size)) return std::nullopt;
  std::string data;
  std::string crlf;
  if (!ReadBytes(size, &data) || !ReadBytes(2, &crlf) || crlf != "\r\n") return std::nullopt;
  return data;
}

RawHttpResponse RawHttpConnection::ReadResponse(bool head) {
  RawHttpResponse r = ReadHead();
  if (r.status == 0) return r;
  if (head) {
    r.complete = true;
    return r;
  }
  if (r.header("transfer-encoding") == "chunked") {
    while (true) {
      const std::optional<std::string> chunk = ReadChunk();
      if (!chunk) return r;
      if (chunk->empty()) break;
      r.body += *chunk;
    }
    r.complete = true;
    return r;
  }
  size_t length = 0;
  if (!absl::SimpleAtoi(r.header("content-length"), &length)) return r;
  r.complete = ReadBytes(length, &r.body);
  return r;
}

std::string RawHttpConnection::ReadToClose() {
  while (Receive()) {
  }
  std::string all = std::move(buffer_);
  buffer_.clear();
  return all;
}

bool RawHttpConnection::WaitForClose() {
  char buf[16384];
  while (true) {
    const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
    if (n < 0 && errno != EINTR) return false;  // a timeout
  }
}

void RawHttpConnection::Close() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

RawHttpResponse HttpGet(int port, absl::string_view path) {
  RawHttpConnection connection(port);
  if (!connection.Send(
          absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"))) {
    return RawHttpResponse{};
  }
  return connection.ReadResponse();
}

ConcurrentStreams::ConcurrentStreams(int port, int count, std::string request)
    : request_(std::move(request)), streams_(static_cast<size_t>(count)) {
  const sockaddr_in addr = Loopback(port);
  for (Stream& stream : streams_) {
    stream.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    // EINPROGRESS, or done; a failure shows as POLLERR in Run.
    connect(stream.fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  }
}

ConcurrentStreams::~ConcurrentStreams() {
  for (const Stream& stream : streams_) {
    if (stream.fd >= 0) close(stream.fd);
  }
}

int ConcurrentStreams::Run(absl::Time deadline,
                           const std::function<void(int, absl::string_view)>& on_data) {
  const int epoll = epoll_create1(EPOLL_CLOEXEC);
  int ended = 0;
  for (size_t i = 0; i < streams_.size(); ++i) {
    Stream& s = streams_[i];
    epoll_event event{};
    event.events = EPOLLIN | (s.sent < request_.size() ? EPOLLOUT : 0);
    event.data.u32 = static_cast<uint32_t>(i);
    if (s.ended || epoll_ctl(epoll, EPOLL_CTL_ADD, s.fd, &event) != 0) {
      ended += s.ended ? 1 : 0;
    }
  }
  std::vector<epoll_event> ready(256);
  char buf[65536];
  while (ended < static_cast<int>(streams_.size()) && absl::Now() < deadline) {
    const int n = epoll_wait(epoll, ready.data(), static_cast<int>(ready.size()), 20);
    for (int k = 0; k < n; ++k) {
      const int i = static_cast<int>(ready[static_cast<size_t>(k)].data.u32);
      const uint32_t events = ready[static_cast<size_t>(k)].events;
      Stream& s = streams_[static_cast<size_t>(i)];
      if (s.ended) continue;
      if ((events & EPOLLOUT) != 0 && s.sent < request_.size()) {
        const ssize_t sent = send(s.fd, request_.data() + s.sent, request_.size() - s.sent,
                                  MSG_NOSIGNAL);
        if (sent > 0) s.sent += static_cast<size_t>(sent);
        if (s.sent == request_.size()) {
          epoll_event event{};
          event.events = EPOLLIN;
          event.data.u32 = static_cast<uint32_t>(i);
          epoll_ctl(epoll, EPOLL_CTL_MOD, s.fd, &event);
        }
      }
      if ((events & (EPOLLIN | EPOLLHUP | EPOLLERR)) == 0) continue;
      while (true) {
        const ssize_t got = recv(s.fd, buf, sizeof(buf), 0);
        if (got > 0) {
          on_data(i, absl::string_view(buf, static_cast<size_t>(got)));
          continue;
        }
        if (got < 0 && (errno == EAGAIN || errno == EINTR)) break;
        s.ended = true;  // closed, reset, or failed to connect
        ++ended;
        close(s.fd);  // which also takes it out of the epoll set
        s.fd = -1;
        break;
      }
    }
  }
  close(epoll);
  return ended;
}

int ThreadCount() {
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return 0;
  int count = 0;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(dir);
  return count;
}

long ResidentKiB() {
  FILE* status = std::fopen("/proc/self/status", "r");
  if (status == nullptr) return 0;
  char line[256];
  long kib = 0;
  while (std::fgets(line, sizeof(line), status) != nullptr) {
    if (std::sscanf(line, "VmRSS: %ld kB", &kib) == 1) break;
  }
  std::fclose(status);
  return kib;
}

}  // namespace tpserve
