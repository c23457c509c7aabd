// HttpServer's routing and protocol: what each request gets back. Connections,
// timeouts and Stop() are in http_server_connections_test.cc.
#include "server/http/http_server.h"

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/http/http_test_client.h"

namespace tpserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kMetrics[] = "# TYPE up gauge\nup 1\n";

// The routes main.cc serves: one handler for every GET path, which answers 404 itself.
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
    if (path == "/empty404") return {404, "text/plain", ""};
    return {404, "text/plain", "no such page\n"};
  }

  std::vector<std::string> paths() {
    absl::MutexLock lock(&mu_);
    return paths_;
  }

  // One request on a connection of its own; the response and whether the server then
  // closed the connection.
  RawHttpResponse Exchange(absl::string_view request, bool* closed = nullptr) {
    RawHttpConnection connection(server_->port(), absl::Seconds(2));
    EXPECT_TRUE(connection.connected());
    EXPECT_TRUE(connection.Send(request));
    RawHttpResponse r = connection.ReadResponse(absl::StartsWith(request, "HEAD"));
    if (closed != nullptr) *closed = connection.WaitForClose();
    return r;
  }

  std::unique_ptr<HttpServer> server_;
  absl::Mutex mu_;
  std::vector<std::string> paths_ ABSL_GUARDED_BY(mu_);
};

TEST_F(HttpServerTest, GetServesHandlerBodyForPathWithoutQuery) {
  const RawHttpResponse r = Exchange("GET /metrics?name=up HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_TRUE(r.complete);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, kMetrics);
  EXPECT_EQ(r.header("content-length"), absl::StrCat(sizeof(kMetrics) - 1));
  EXPECT_EQ(r.header("content-type"), "text/plain; version=0.0.4");
  EXPECT_THAT(paths(), ElementsAre("/metrics"));
}

TEST_F(HttpServerTest, HandlerStatusIsSentAsIs) {
  const RawHttpResponse r = Exchange("GET /nope HTTP/1.0\r\n\r\n");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.body, "no such page\n");
}

TEST_F(HttpServerTest, ErrorWithoutBodyGetsAText) {
  EXPECT_EQ(Exchange("GET /empty404 HTTP/1.1\r\n\r\n").body, "not found\n");
}

TEST_F(HttpServerTest, InvalidHandlerStatusBecomes500) {
  EXPECT_EQ(Exchange("GET /bad HTTP/1.1\r\n\r\n").status, 500);
}

TEST_F(HttpServerTest, HeadSendsGetHeadersWithoutBody) {
  bool closed = false;
  const RawHttpResponse r =
      Exchange("HEAD /metrics HTTP/1.1\r\nConnection: close\r\n\r\n", &closed);
  ASSERT_TRUE(r.complete);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.header("content-length"), absl::StrCat(sizeof(kMetrics) - 1));
  EXPECT_THAT(r.body, IsEmpty());
  EXPECT_TRUE(closed);  // and no body came before the close
}

TEST_F(HttpServerTest, OtherMethodsGet405WithAllowAndTheConnectionCloses) {
  for (const char* request :
       {"POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
        "PUT /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        "DELETE /metrics HTTP/1.1\r\n\r\n", "OPTIONS /metrics HTTP/1.1\r\n\r\n",
        "TRACE /metrics HTTP/1.1\r\n\r\n", "PATCH /x HTTP/1.1\r\nContent-Length: 1\r\n\r\nx"}) {
    bool closed = false;
    const RawHttpResponse r = Exchange(request, &closed);
    EXPECT_EQ(r.status, 405) << absl::CEscape(request);
    EXPECT_EQ(r.header("allow"), "GET, HEAD") << absl::CEscape(request);
    EXPECT_EQ(r.header("connection"), "close");
    EXPECT_TRUE(closed) << absl::CEscape(request);
  }
  EXPECT_THAT(paths(), IsEmpty());
}

TEST_F(HttpServerTest, MalformedRequestsGetOne400AndTheConnectionCloses) {
  for (const char* request :
       {"garbage\r\n\r\n", "GET /metrics\r\n\r\n", "GET /metrics HTTP/2.0\r\nHost: x\r\n\r\n",
        "BREW /metrics HTTP/1.1\r\nHost: x\r\n\r\n"}) {
    RawHttpConnection connection(server_->port(), absl::Seconds(2));
    ASSERT_TRUE(connection.Send(request));
    EXPECT_EQ(connection.ReadResponse().status, 400) << absl::CEscape(request);
    EXPECT_EQ(connection.ReadResponse().status, 0) << absl::CEscape(request);  // nothing more
  }
  EXPECT_THAT(paths(), IsEmpty());
}

TEST_F(HttpServerTest, HeadOver8KiBIsRefused) {
  const std::string request =
      absl::StrCat("GET /metrics HTTP/1.1\r\nX-Big: ", std::string(9 << 10, 'a'), "\r\n\r\n");
  bool closed = false;
  EXPECT_EQ(Exchange(request, &closed).status, 400);
  EXPECT_TRUE(closed);
  EXPECT_THAT(paths(), IsEmpty());
}

TEST_F(HttpServerTest, KeepAliveAnswersPipelinedRequestsInOrder) {
  RawHttpConnection connection(server_->port());
  ASSERT_TRUE(connection.Send("GET /metrics HTTP/1.1\r\n\r\nGET /other HTTP/1.1\r\n\r\n"));
  // A 404 keeps the connection; the errors after which a request may not have been read
  // in full (400, 405, 413, 414) end it, as the tests above check.
  const RawHttpResponse first = connection.ReadResponse();
  EXPECT_EQ(first.status, 200);
  EXPECT_EQ(first.header("keep-alive"), "timeout=5, max=100");
  EXPECT_EQ(connection.ReadResponse().status, 404);
  ASSERT_TRUE(connection.Send("GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n"));
  const RawHttpResponse last = connection.ReadResponse();
  EXPECT_EQ(last.body, kMetrics);
  EXPECT_EQ(last.header("connection"), "close");
  EXPECT_TRUE(connection.WaitForClose());
  EXPECT_THAT(paths(), ElementsAre("/metrics", "/other", "/metrics"));
}

// Without MSG_NOSIGNAL the writes into the reset connection raise SIGPIPE, which kills
// the test binary.
TEST_F(HttpServerTest, ClientHangingUpMidResponseDoesNotRaiseSigpipe) {
  {
    RawHttpConnection quitter(server_->port());
    ASSERT_TRUE(quitter.Send("GET /big HTTP/1.1\r\n\r\n"));
  }
  // The connection thread writes 16 MiB into the closed connection meanwhile.
  for (int i = 0; i < 200 && paths().empty(); ++i) absl::SleepFor(absl::Milliseconds(10));
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(HttpGet(server_->port(), "/metrics").status, 200);
  EXPECT_THAT(paths(), ElementsAre("/big", "/metrics"));
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

TEST(HttpServerRoutesTest, ExactPathsOnlyAndOtherMethods405OnlyOnThem) {
  HttpRoutes routes;
  routes.get["/a.b"] = [](absl::string_view) { return HttpResponse{200, "text/plain", "ab"}; };
  HttpServerConfig config;
  absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start(config, routes);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  EXPECT_EQ(HttpGet(port, "/a.b").body, "ab");
  EXPECT_EQ(HttpGet(port, "/a.b?q=1").body, "ab");
  for (const char* path : {"/axb", "/a.b/", "/a", "/"}) {
    const RawHttpResponse r = HttpGet(port, path);
    EXPECT_EQ(r.status, 404) << path;
    EXPECT_EQ(r.body, "not found\n") << path;
  }
  RawHttpConnection post(port);
  ASSERT_TRUE(post.Send("POST /elsewhere HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi"));
  EXPECT_EQ(post.ReadResponse().status, 404);
  RawHttpConnection trace(port);
  ASSERT_TRUE(trace.Send("OPTIONS /a.b HTTP/1.1\r\n\r\n"));
  EXPECT_EQ(trace.ReadResponse().status, 405);
}

TEST(HttpServerRoutesTest, BodyOverTheLimitGets413AndTheConnectionCloses) {
  HttpRoutes routes;
  routes.get["/metrics"] = [](absl::string_view) { return HttpResponse{}; };
  HttpServerConfig config;
  config.max_body_bytes = 1024;
  absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start(config, routes);
  ASSERT_TRUE(server.ok()) << server.status();
  RawHttpConnection post((*server)->port());
  ASSERT_TRUE(post.Send(absl::StrCat("POST /metrics HTTP/1.1\r\nContent-Length: 4096\r\n\r\n",
                                     std::string(4096, 'b'))));
  EXPECT_EQ(post.ReadResponse().status, 413);
  EXPECT_TRUE(post.WaitForClose());
}

TEST(HttpServerStartTest, RejectsBadHostPortConfigAndRoutes) {
  const HttpHandler handler = [](absl::string_view) { return HttpResponse{}; };
  EXPECT_FALSE(HttpServer::Start("127.0.0.1", 70000, handler).ok());
  const absl::Status unresolved = HttpServer::Start("no such host.invalid", 0, handler).status();
  EXPECT_THAT(unresolved.message(), HasSubstr("cannot listen on no such host.invalid:0"));
  EXPECT_FALSE(HttpServer::Start("127.0.0.1", 0, nullptr).ok());
  HttpServerConfig config;
  config.idle_timeout = absl::ZeroDuration();
  HttpRoutes routes;
  routes.get["/"] = handler;
  EXPECT_FALSE(HttpServer::Start(config, routes).ok());
  EXPECT_FALSE(HttpServer::Start(HttpServerConfig{}, HttpRoutes{}).ok());
  HttpRoutes relative;
  relative.get["metrics"] = handler;
  EXPECT_FALSE(HttpServer::Start(HttpServerConfig{}, relative).ok());
}

}  // namespace
}  // namespace tpserve
