// HttpServer's routing and protocol: what each request gets back. Connections,
// timeouts and Stop() are in http_server_connections_test.cc, async handlers and
// streams in http_server_streaming_test.cc.
#include "server/http/http_server.h"

#include <cerrno>
#include <cstring>
#include <stdexcept>
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

// The server as main.cc starts it: one handler for every GET path, answering 404 itself.
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
    if (path == "/badheader") return {200, "text/plain", "", {{"X-Evil", "a\r\nInjected: 1"}}};
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

TEST_F(HttpServerTest, PathIsPercentDecoded) {
  EXPECT_EQ(Exchange("GET /me%74rics HTTP/1.1\r\n\r\n").body, kMetrics);
  EXPECT_EQ(Exchange("GET http://example.com/metrics HTTP/1.1\r\n\r\n").body, kMetrics);
  EXPECT_THAT(paths(), ElementsAre("/metrics", "/metrics"));
}

TEST_F(HttpServerTest, HandlerStatusIsSentAsIs) {
  const RawHttpResponse r = Exchange("GET /nope HTTP/1.0\r\n\r\n");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.body, "no such page\n");
}

TEST_F(HttpServerTest, ErrorWithoutBodyGetsAText) {
  EXPECT_EQ(Exchange("GET /empty404 HTTP/1.1\r\n\r\n").body, "not found\n");
}

TEST_F(HttpServerTest, InvalidHandlerResponseBecomes500) {
  EXPECT_EQ(Exchange("GET /bad HTTP/1.1\r\n\r\n").status, 500);
  const RawHttpResponse r = Exchange("GET /badheader HTTP/1.1\r\n\r\n");
  EXPECT_EQ(r.status, 500);
  EXPECT_EQ(r.header("injected"), "");
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

// Beast reads a refused request's body in full, so the connection stays usable.
TEST_F(HttpServerTest, OtherMethodsGet405WithAllow) {
  for (const char* request :
       {"POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
        "PUT /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        "DELETE /metrics HTTP/1.1\r\n\r\n", "OPTIONS /metrics HTTP/1.1\r\n\r\n",
        "TRACE /metrics HTTP/1.1\r\n\r\n", "BREW /metrics HTTP/1.1\r\n\r\n",
        "PATCH /x HTTP/1.1\r\nContent-Length: 1\r\n\r\nx"}) {
    RawHttpConnection connection(server_->port(), absl::Seconds(2));
    ASSERT_TRUE(connection.Send(request));
    const RawHttpResponse r = connection.ReadResponse();
    EXPECT_EQ(r.status, 405) << absl::CEscape(request);
    EXPECT_EQ(r.header("allow"), "GET, HEAD") << absl::CEscape(request);
    ASSERT_TRUE(connection.Send("GET /metrics HTTP/1.1\r\n\r\n"));
    EXPECT_EQ(connection.ReadResponse().status, 200) << absl::CEscape(request);
  }
  EXPECT_THAT(paths(), ElementsAre("/metrics", "/metrics", "/metrics", "/metrics", "/metrics",
                                   "/metrics", "/metrics"));
}

TEST_F(HttpServerTest, MalformedRequestsGetOne400AndTheConnectionCloses) {
  for (const char* request :
       {"garbage\r\n\r\n", "GET /metrics\r\n\r\n", "GET /metrics HTTP/2.0\r\nHost: x\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nX: a\x01z\r\n\r\n", "GET metrics HTTP/1.1\r\n\r\n",
        "GET /%zz HTTP/1.1\r\n\r\n", "GET /a%00 HTTP/1.1\r\n\r\n",
        "POST /metrics HTTP/1.1\r\nContent-Length: x\r\n\r\n",
        "POST /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"}) {
    RawHttpConnection connection(server_->port(), absl::Seconds(2));
    ASSERT_TRUE(connection.Send(request));
    const RawHttpResponse r = connection.ReadResponse();
    EXPECT_EQ(r.status, 400) << absl::CEscape(request);
    EXPECT_EQ(r.body, "bad request\n") << absl::CEscape(request);
    EXPECT_EQ(r.header("connection"), "close") << absl::CEscape(request);
    EXPECT_EQ(connection.ReadResponse().status, 0) << absl::CEscape(request);  // nothing more
  }
  EXPECT_THAT(paths(), IsEmpty());
}

TEST_F(HttpServerTest, HeadOverTheLimitGets431) {
  EXPECT_EQ(Exchange(absl::StrCat("GET /metrics HTTP/1.1\r\nX-Big: ", std::string(15 << 10, 'a'),
                                  "\r\n\r\n"))
                .status,
            200);
  const std::string request =
      absl::StrCat("GET /metrics HTTP/1.1\r\nX-Big: ", std::string(17 << 10, 'a'), "\r\n\r\n");
  bool closed = false;
  EXPECT_EQ(Exchange(request, &closed).status, 431);
  EXPECT_TRUE(closed);
  EXPECT_THAT(paths(), ElementsAre("/metrics"));
}

TEST_F(HttpServerTest, KeepAliveAnswersPipelinedRequestsInOrder) {
  RawHttpConnection connection(server_->port());
  ASSERT_TRUE(connection.Send("GET /metrics HTTP/1.1\r\n\r\nGET /other HTTP/1.1\r\n\r\n"));
  EXPECT_EQ(connection.ReadResponse().status, 200);
  EXPECT_EQ(connection.ReadResponse().status, 404);  // a handler's 404 keeps the connection
  ASSERT_TRUE(connection.Send("GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n"));
  const RawHttpResponse last = connection.ReadResponse();
  EXPECT_EQ(last.body, kMetrics);
  EXPECT_EQ(last.header("connection"), "close");
  EXPECT_TRUE(connection.WaitForClose());
  EXPECT_THAT(paths(), ElementsAre("/metrics", "/other", "/metrics"));
}

TEST_F(HttpServerTest, Http10ClosesUnlessItAsksForKeepAlive) {
  bool closed = false;
  EXPECT_EQ(Exchange("GET /metrics HTTP/1.0\r\n\r\n", &closed).body, kMetrics);
  EXPECT_TRUE(closed);
  RawHttpConnection connection(server_->port());
  ASSERT_TRUE(connection.Send("GET /metrics HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
  EXPECT_EQ(connection.ReadResponse().header("connection"), "keep-alive");
  ASSERT_TRUE(connection.Send("GET /metrics HTTP/1.0\r\n\r\n"));
  EXPECT_EQ(connection.ReadResponse().status, 200);
  EXPECT_TRUE(connection.WaitForClose());
}

// Writes into the reset connection must not raise SIGPIPE, which would kill the binary.
TEST_F(HttpServerTest, ClientHangingUpMidResponseDoesNotRaiseSigpipe) {
  {
    RawHttpConnection quitter(server_->port());
    ASSERT_TRUE(quitter.Send("GET /big HTTP/1.1\r\n\r\n"));
  }
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

std::unique_ptr<HttpServer> StartServer(const HttpServerConfig& config, HttpRoutes routes) {
  absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start(config, std::move(routes));
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

TEST(HttpServerRoutesTest, ExactPathsOnlyAndUnknownPaths404) {
  HttpRoutes routes;
  routes.Add("GET", "/a.b", [](const HttpRequest&) { return HttpResponse{200, "text/plain", "ab"}; });
  std::unique_ptr<HttpServer> server = StartServer(HttpServerConfig{}, std::move(routes));
  ASSERT_NE(server, nullptr);
  const int port = server->port();
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
  RawHttpConnection options(port);
  ASSERT_TRUE(options.Send("OPTIONS /a.b HTTP/1.1\r\n\r\n"));
  const RawHttpResponse refused = options.ReadResponse();
  EXPECT_EQ(refused.status, 405);
  EXPECT_EQ(refused.header("allow"), "GET, HEAD");
}

TEST(HttpServerRoutesTest, RequestReachesTheHandlerWhole) {
  absl::Mutex mu;
  std::vector<HttpRequest> seen;
  HttpRoutes routes;
  routes.Add("POST", "/v1/echo", [&](const HttpRequest& request) {
    absl::MutexLock lock(&mu);
    seen.push_back(request);
    return HttpResponse{200, "application/json", request.body, {{"X-Request-Id", "7"}}};
  });
  std::unique_ptr<HttpServer> server = StartServer(HttpServerConfig{}, std::move(routes));
  ASSERT_NE(server, nullptr);
  RawHttpConnection connection(server->port());
  ASSERT_TRUE(connection.Send(
      "POST /v1/echo?stream=true HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
      "Content-Length: 9\r\n\r\n{\"a\": 1}\n"
      "POST /v1/echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"));
  const RawHttpResponse first = connection.ReadResponse();
  EXPECT_EQ(first.body, "{\"a\": 1}\n");
  EXPECT_EQ(first.header("content-type"), "application/json");
  EXPECT_EQ(first.header("x-request-id"), "7");
  EXPECT_EQ(connection.ReadResponse().body, "abcde");  // de-chunked
  absl::MutexLock lock(&mu);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].method, "POST");
  EXPECT_EQ(seen[0].target, "/v1/echo?stream=true");
  EXPECT_EQ(seen[0].path, "/v1/echo");
  EXPECT_EQ(seen[0].query, "stream=true");
  EXPECT_EQ(seen[0].header("content-type"), "application/json");
  EXPECT_EQ(seen[0].header("HOST"), "t");
  EXPECT_TRUE(absl::StartsWith(seen[0].peer, "127.0.0.1:")) << seen[0].peer;
}

TEST(HttpServerRoutesTest, ExpectContinueGets100BeforeTheBody) {
  HttpRoutes routes;
  routes.Add("POST", "/p", [](const HttpRequest& r) { return HttpResponse{200, "text/plain", r.body}; });
  std::unique_ptr<HttpServer> server = StartServer(HttpServerConfig{}, std::move(routes));
  ASSERT_NE(server, nullptr);
  RawHttpConnection connection(server->port());
  ASSERT_TRUE(connection.Send(
      "POST /p HTTP/1.1\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n"));
  EXPECT_EQ(connection.ReadHead().status, 100);
  ASSERT_TRUE(connection.Send("body"));
  EXPECT_EQ(connection.ReadResponse().body, "body");
}

TEST(HttpServerRoutesTest, HandlerThatThrowsGets500) {
  HttpRoutes routes;
  routes.Add("GET", "/t", [](const HttpRequest&) -> HttpResponse { throw std::runtime_error("x"); });
  std::unique_ptr<HttpServer> server = StartServer(HttpServerConfig{}, std::move(routes));
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(HttpGet(server->port(), "/t").status, 500);
  EXPECT_EQ(HttpGet(server->port(), "/t").status, 500);
}

TEST(HttpServerRoutesTest, BodyOverTheLimitGets413AndTheConnectionCloses) {
  HttpRoutes routes;
  routes.Add("POST", "/metrics", [](const HttpRequest&) { return HttpResponse{}; });
  HttpServerConfig config;
  config.max_body_bytes = 1024;
  std::unique_ptr<HttpServer> server = StartServer(config, std::move(routes));
  ASSERT_NE(server, nullptr);
  for (const std::string& request :
       {absl::StrCat("POST /metrics HTTP/1.1\r\nContent-Length: 4096\r\n\r\n",
                     std::string(4096, 'b')),
        absl::StrCat("POST /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n800\r\n",
                     std::string(2048, 'b'), "\r\n0\r\n\r\n")}) {
    RawHttpConnection post(server->port());
    ASSERT_TRUE(post.Send(request));
    EXPECT_EQ(post.ReadResponse().status, 413);
    EXPECT_TRUE(post.WaitForClose());
  }
}

TEST(HttpServerStartTest, RejectsBadHostPortConfigAndRoutes) {
  const HttpPathHandler handler = [](absl::string_view) { return HttpResponse{}; };
  EXPECT_FALSE(HttpServer::Start("127.0.0.1", 70000, handler).ok());
  const absl::Status unresolved = HttpServer::Start("no such host.invalid", 0, handler).status();
  EXPECT_THAT(unresolved.message(), HasSubstr("cannot listen on no such host.invalid:0"));
  EXPECT_FALSE(HttpServer::Start("127.0.0.1", 0, nullptr).ok());
  HttpRoutes routes;
  routes.Add("GET", "/", [](const HttpRequest&) { return HttpResponse{}; });
  HttpServerConfig config;
  config.idle_timeout = absl::ZeroDuration();
  EXPECT_FALSE(HttpServer::Start(config, routes).ok());
  config = HttpServerConfig{};
  config.io_threads = 0;
  EXPECT_FALSE(HttpServer::Start(config, routes).ok());
  EXPECT_FALSE(HttpServer::Start(HttpServerConfig{}, HttpRoutes{}).ok());
  HttpRoutes relative;
  relative.Add("GET", "metrics", [](const HttpRequest&) { return HttpResponse{}; });
  EXPECT_FALSE(HttpServer::Start(HttpServerConfig{}, relative).ok());
}

}  // namespace
}  // namespace tpserve
