#include "server/http/http_test_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace tpserve {

std::string RawHttpResponse::header(const std::string& lower_name) const {
  auto it = headers.find(lower_name);
  return it == headers.end() ? "" : it->second;
}

RawHttpConnection::RawHttpConnection(int port, absl::Duration timeout)
    : fd_(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
  const timeval tv = absl::ToTimeval(timeout);
  setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
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

RawHttpResponse RawHttpConnection::ReadResponse(bool head) {
  RawHttpResponse r;
  size_t end;
  while ((end = buffer_.find("\r\n\r\n")) == std::string::npos) {
    if (!Receive()) return r;
  }
  const std::vector<absl::string_view> lines =
      absl::StrSplit(absl::string_view(buffer_).substr(0, end), "\r\n");
  if (!absl::StartsWith(lines[0], "HTTP/1.1 ") ||
      !absl::SimpleAtoi(lines[0].substr(9, 3), &r.status)) {
    return r;
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::vector<absl::string_view> kv = absl::StrSplit(lines[i], absl::MaxSplits(':', 1));
    if (kv.size() == 2) {
      r.headers[absl::AsciiStrToLower(kv[0])] = std::string(absl::StripAsciiWhitespace(kv[1]));
    }
  }
  size_t length = 0;
  if (!head && !absl::SimpleAtoi(r.header("content-length"), &length)) return r;
  const size_t body_start = end + 4;
  while (buffer_.size() < body_start + length) {
    if (!Receive()) return r;
  }
  r.body = buffer_.substr(body_start, length);
  buffer_.erase(0, body_start + length);
  r.complete = true;
  return r;
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

}  // namespace tpserve
