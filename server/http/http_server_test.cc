#include "server/http/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tpserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kMetrics[] = "# TYPE up gauge\nup 1\n";

// A blocking connection to 127.0.0.1:port whose reads and writes give up after 5 s.
class Client {
 public:
  explicit Client(int port) : fd_(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    const timeval timeout{5, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~Client() { Close(); }

  bool connected() const { return connected_; }
  bool Send(absl::string_view data) {
    return send(fd_, data.data(), data.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(data.size());
  }
  // Everything the server sends until it closes the connection; `closed` says whether
  // it did within the timeout.
  std::string ReadToEnd(bool* closed) {
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = recv(fd_, buf, sizeof(buf), 0)) > 0) out.append(buf, static_cast<size_t>(n));
    *closed = n == 0;
    return out;
  }
  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
  bool connected_ = false;
};

struct Response {
  bool closed = false;  // the server closed the connection after the response
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  std::string raw;

  std::string header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? "" : it->second;
  }
};

Response Fetch(int port, absl::string_view request) {
  Client client(port);
  EXPECT_TRUE(client.connected());
  EXPECT_TRUE(client.Send(request));
  Response r;
  r.raw = client.ReadToEnd(&r.closed);
  const size_t end = r.raw.find("\r\n\r\n");
  if (end == std::string::npos) return r;
  r.body = r.raw.substr(end + 4);
  const std::vector<absl::string_view> lines =
      absl::StrSplit(absl::string_view(r.raw).substr(0, end), "\r\n");
  EXPECT_TRUE(absl::StartsWith(lines[0], "HTTP/1.1 ")) << lines[0];
  EXPECT_TRUE(absl::SimpleAtoi(lines[0].substr(9, 3), &r.status)) << lines[0];
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::vector<absl::string_view> kv = absl::StrSplit(lines[i], absl::MaxSplits(':', 1));
    EXPECT_EQ(kv.size(), 2u) << lines[i];
    if (kv.size() == 2)
      r.headers[absl::AsciiStrToLower(kv[0])] = std::string(absl::StripAsciiWhitespace(kv[1]));
  }
  return r;
}

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<HttpServer>> server =
        HttpServer::Start("127.0.0.1", 0, [this](absl::string_view path) { return Handle(path); });
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }

  HttpResponse Handle(absl::string_view path) {
    absl::MutexLock lock(&mu_);
    paths_.emplace_back(path);
    if (path == "/metrics") return {200, "text/plain; version=0.0.4", kMetrics};
    if (path == "/big") return {200, "text/plain", std::string(16 << 20, 'x')};
    if (path == "/bad") return {0, "text/plain", ""};
    return {404, "text/plain", "no such page\n"};
  }

  std::vector<std::string> paths() {
    absl::MutexLock lock(&mu_);
    return paths_;
  }

  std::unique_ptr<HttpServer> server_;
  absl::Mutex mu_;
  std::vector<std::string> paths_ ABSL_GUARDED_BY(mu_);
};

TEST_F(HttpServerTest, GetServesHandlerBodyForPathWithoutQuery) {
  const Response r = Fetch(server_->port(), "GET /metrics?name=up HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body, kMetrics);
  EXPECT_EQ(r.header("content-length"), absl::StrCat(sizeof(kMetrics) - 1));
  EXPECT_EQ(r.header("content-type"), "text/plain; version=0.0.4");
  EXPECT_EQ(r.header("connection"), "close");
  EXPECT_TRUE(r.closed);
  EXPECT_THAT(paths(), ElementsAre("/metrics"));
}

TEST_F(HttpServerTest, HandlerStatusIsSentAsIs) {
  const Response r = Fetch(server_->port(), "GET /nope HTTP/1.0\r\n\r\n");
  EXPECT_EQ(r.status, 404) << r.raw;
  EXPECT_EQ(r.body, "no such page\n");
}

TEST_F(HttpServerTest, InvalidHandlerStatusBecomes500) {
  EXPECT_EQ(Fetch(server_->port(), "GET /bad HTTP/1.1\r\n\r\n").status, 500);
}

TEST_F(HttpServerTest, HeadSendsGetHeadersWithoutBody) {
  const Response r = Fetch(server_->port(), "HEAD /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.header("content-length"), absl::StrCat(sizeof(kMetrics) - 1));
  EXPECT_THAT(r.body, IsEmpty());
  EXPECT_TRUE(r.closed);
}

TEST_F(HttpServerTest, OtherMethodsGet405WithAllow) {
  const Response r =
      Fetch(server_->port(), "POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello");
  EXPECT_EQ(r.status, 405) << r.raw;
  EXPECT_EQ(r.header("allow"), "GET, HEAD");
  EXPECT_THAT(paths(), IsEmpty());
}

TEST_F(HttpServerTest, MalformedRequestLinesGet400) {
  for (const char* request : {"garbage\r\n\r\n", "\r\n\r\n", "GET /metrics\r\n\r\n",
                              "GET metrics HTTP/1.1\r\n\r\n", "GET /metrics HTTP/2.0\r\n\r\n",
                              "GET  /metrics HTTP/1.1\r\n\r\n", "G(T /metrics HTTP/1.1\r\n\r\n"}) {
    const Response r = Fetch(server_->port(), request);
    EXPECT_EQ(r.status, 400) << absl::CEscape(request) << " -> " << r.raw;
    EXPECT_TRUE(r.closed);
  }
  EXPECT_THAT(paths(), IsEmpty());
}

TEST_F(HttpServerTest, HeadOver8KiBGets431) {
  const std::string request =
      absl::StrCat("GET /metrics HTTP/1.1\r\nX-Big: ", std::string(9 << 10, 'a'), "\r\n\r\n");
  const Response r = Fetch(server_->port(), request);
  EXPECT_EQ(r.status, 431) << r.raw.substr(0, 200);
  EXPECT_TRUE(r.closed);
  EXPECT_THAT(paths(), IsEmpty());
}

TEST_F(HttpServerTest, OneResponsePerConnection) {
  const Response r =
      Fetch(server_->port(), "GET /metrics HTTP/1.1\r\n\r\nGET /other HTTP/1.1\r\n\r\n");
  EXPECT_TRUE(r.closed);
  EXPECT_EQ(r.body, kMetrics);  // nothing after the first response
  EXPECT_THAT(paths(), ElementsAre("/metrics"));
}

TEST_F(HttpServerTest, SilentClientDoesNotBlockTheNextOne) {
  Client silent(server_->port());
  ASSERT_TRUE(silent.connected());
  const absl::Time start = absl::Now();
  EXPECT_EQ(Fetch(server_->port(), "GET /metrics HTTP/1.1\r\n\r\n").status, 200);
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
}

// A client that keeps sending a byte at a time never finishes its head; the deadline is
// for the whole head, not for each read.
TEST_F(HttpServerTest, TricklingClientIsCutOffAtTheDeadline) {
  Client slow(server_->port());
  ASSERT_TRUE(slow.connected());
  ASSERT_TRUE(slow.Send("GET /metrics HTTP/1.1\r\n"));
  std::thread trickle([&slow] {
    for (int i = 0; i < 50 && slow.Send("a"); ++i) absl::SleepFor(absl::Milliseconds(100));
  });
  absl::SleepFor(absl::Milliseconds(100));
  const absl::Time start = absl::Now();
  EXPECT_EQ(Fetch(server_->port(), "GET /metrics HTTP/1.1\r\n\r\n").status, 200);
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  trickle.join();
}

// Without MSG_NOSIGNAL the second write into the reset connection raises SIGPIPE, which
// kills the test binary.
TEST_F(HttpServerTest, ClientHangingUpMidResponseDoesNotRaiseSigpipe) {
  {
    Client quitter(server_->port());
    ASSERT_TRUE(quitter.Send("GET /big HTTP/1.1\r\n\r\n"));
  }
  EXPECT_EQ(Fetch(server_->port(), "GET /metrics HTTP/1.1\r\n\r\n").status, 200);
  EXPECT_THAT(paths(), ElementsAre("/big", "/metrics"));
}

TEST_F(HttpServerTest, DestructorReturnsPromptlyWithSilentClient) {
  Client silent(server_->port());
  ASSERT_TRUE(silent.connected());
  absl::SleepFor(absl::Milliseconds(200));  // The server is now waiting for its head.
  const absl::Time start = absl::Now();
  server_.reset();
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(1500));
}

TEST_F(HttpServerTest, StartOnPortInUseNamesTheAddress) {
  const int port = server_->port();
  absl::StatusOr<std::unique_ptr<HttpServer>> second =
      HttpServer::Start("127.0.0.1", port, [](absl::string_view) { return HttpResponse{}; });
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(second.status().message(), HasSubstr(absl::StrCat("127.0.0.1:", port)));
  EXPECT_THAT(second.status().message(), HasSubstr(std::strerror(EADDRINUSE)));
}

TEST_F(HttpServerTest, PortZeroPicksAFreePort) { EXPECT_GT(server_->port(), 0); }

TEST(HttpServerStartTest, RejectsBadHostAndPort) {
  const HttpHandler handler = [](absl::string_view) { return HttpResponse{}; };
  EXPECT_FALSE(HttpServer::Start("127.0.0.1", 70000, handler).ok());
  EXPECT_FALSE(HttpServer::Start("no such host.invalid", 0, handler).ok());
  EXPECT_FALSE(HttpServer::Start("127.0.0.1", 0, nullptr).ok());
}

}  // namespace
}  // namespace tpserve
