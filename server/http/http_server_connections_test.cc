// HttpServer's connections: concurrency, the idle, request and write timeouts, the
// connection and request limits and Stop(), each against the real server over loopback.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/http/http_server.h"
#include "server/http/http_test_client.h"

namespace tpserve {
namespace {

constexpr char kMetrics[] = "# TYPE up gauge\nup 1\n";

HttpResponse Metrics(absl::string_view path) {
  if (path == "/metrics") return {200, "text/plain; version=0.0.4", kMetrics};
  if (path == "/big") return {200, "text/plain", std::string(16 << 20, 'x')};
  return {404, "text/plain", "no such page\n"};
}

std::unique_ptr<HttpServer> StartServer(const HttpServerConfig& config) {
  HttpRoutes routes;
  routes.SetFallback([](const HttpRequest& request) { return Metrics(request.path); });
  absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start(config, routes);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

// Sends a request head a header line every 100 ms, never ending it, until the server
// closes the connection or `limit` passes.
class Trickler {
 public:
  Trickler(int port, absl::Duration limit) : connection_(port) {
    EXPECT_TRUE(connection_.Send("GET /metrics HTTP/1.1\r\n"));
    thread_ = std::thread([this, limit] {
      const absl::Time end = absl::Now() + limit;
      while (absl::Now() < end && connection_.Send("X-Slow: 1\r\n")) {
        absl::SleepFor(absl::Milliseconds(100));
      }
    });
  }
  ~Trickler() { thread_.join(); }
  RawHttpConnection& connection() { return connection_; }

 private:
  RawHttpConnection connection_;
  std::thread thread_;
};

// Requests on different connections are pending at once; another thread answers them
// once all have arrived.
TEST(HttpServerConnectionsTest, RequestsOnSeveralConnectionsArePendingAtOnce) {
  constexpr int kClients = 8;
  absl::Mutex mu;
  std::vector<std::shared_ptr<HttpResponder>> pending;
  HttpRoutes routes;
  routes.Add("GET", "/metrics", [&](HttpRequest, std::shared_ptr<HttpResponder> responder) {
    absl::MutexLock lock(&mu);
    pending.push_back(std::move(responder));
  });
  absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start({}, routes);
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&] { EXPECT_EQ(HttpGet((*server)->port(), "/metrics").body, "ok"); });
  }
  {
    absl::MutexLock lock(&mu);
    EXPECT_TRUE(mu.AwaitWithTimeout(
        absl::Condition(+[](decltype(pending)* p) { return p->size() == kClients; }, &pending),
        absl::Seconds(5)));
    for (auto& responder : pending) responder->Respond({200, "text/plain", "ok"});
  }
  for (std::thread& client : clients) client.join();
}

TEST(HttpServerConnectionsTest, IdleConnectionIsClosedAfterTheIdleTimeout) {
  HttpServerConfig config;
  config.idle_timeout = absl::Milliseconds(300);
  std::unique_ptr<HttpServer> server = StartServer(config);
  ASSERT_NE(server, nullptr);
  for (const bool after_a_request : {false, true}) {
    RawHttpConnection idle(server->port());
    if (after_a_request) {
      ASSERT_TRUE(idle.Send("GET /metrics HTTP/1.1\r\n\r\n"));
      EXPECT_EQ(idle.ReadResponse().status, 200);
    }
    const absl::Time start = absl::Now();
    EXPECT_TRUE(idle.WaitForClose());
    const absl::Duration took = absl::Now() - start;
    EXPECT_GE(took, absl::Milliseconds(250)) << after_a_request;
    EXPECT_LT(took, absl::Seconds(2)) << after_a_request;
  }
}

// The deadline is for the whole request, not for each read, which the trickle beats.
TEST(HttpServerConnectionsTest, TricklingClientIsCutOffAtTheRequestTimeout) {
  HttpServerConfig config;
  config.request_timeout = absl::Seconds(1);
  std::unique_ptr<HttpServer> server = StartServer(config);
  ASSERT_NE(server, nullptr);
  const absl::Time start = absl::Now();
  Trickler slow(server->port(), absl::Seconds(5));
  absl::SleepFor(absl::Milliseconds(200));
  const absl::Time scrape = absl::Now();
  EXPECT_EQ(HttpGet(server->port(), "/metrics").status, 200);
  EXPECT_LT(absl::Now() - scrape, absl::Milliseconds(500));
  EXPECT_EQ(slow.connection().ReadResponse().status, 408);
  EXPECT_TRUE(slow.connection().WaitForClose());
  const absl::Duration took = absl::Now() - start;
  EXPECT_GE(took, absl::Milliseconds(900));
  EXPECT_LT(took, absl::Seconds(3));
}

// Each header line is short; together they pass the head budget.
TEST(HttpServerConnectionsTest, EndlessHeadIsCutOffByItsSize) {
  std::unique_ptr<HttpServer> server = StartServer(HttpServerConfig{});
  ASSERT_NE(server, nullptr);
  RawHttpConnection flood(server->port());
  std::string head = "GET /metrics HTTP/1.1\r\n";
  while (head.size() < (64 << 10)) head += "X-Flood: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n";
  ASSERT_TRUE(flood.Send(head));
  EXPECT_EQ(flood.ReadResponse().status, 431);
  EXPECT_TRUE(flood.WaitForClose());
}

// The server as main.cc starts it, with 100 connections that send nothing and one
// slowloris client open.
TEST(HttpServerConnectionsTest, ScrapeAnswersWithinASecondWithHundredIdleConnections) {
  absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start("127.0.0.1", 0, Metrics);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  std::vector<std::unique_ptr<RawHttpConnection>> idle;
  for (int i = 0; i < 100; ++i) {
    idle.push_back(std::make_unique<RawHttpConnection>(port));
    ASSERT_TRUE(idle.back()->connected()) << i;
  }
  Trickler slow(port, absl::Seconds(2));
  absl::SleepFor(absl::Milliseconds(200));
  std::vector<absl::Duration> took;
  for (int i = 0; i < 10; ++i) {
    const absl::Time start = absl::Now();
    const RawHttpResponse r = HttpGet(port, "/metrics");
    took.push_back(absl::Now() - start);
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body, kMetrics);
  }
  std::sort(took.begin(), took.end());
  std::printf(
      "scrape with 100 idle connections and a slowloris client open: median %.2f ms, "
      "max %.2f ms (10 scrapes)\n",
      absl::ToDoubleMilliseconds(took[took.size() / 2]), absl::ToDoubleMilliseconds(took.back()));
  EXPECT_LT(took.back(), absl::Seconds(1));
}

TEST(HttpServerConnectionsTest, ConnectionsBeyondTheLimitAreClosedAtOnce) {
  HttpServerConfig config;
  config.max_connections = 2;
  config.idle_timeout = absl::Milliseconds(500);
  std::unique_ptr<HttpServer> server = StartServer(config);
  ASSERT_NE(server, nullptr);
  RawHttpConnection first(server->port());
  RawHttpConnection second(server->port());
  absl::SleepFor(absl::Milliseconds(100));
  RawHttpConnection third(server->port());
  const absl::Time start = absl::Now();
  EXPECT_TRUE(third.WaitForClose());
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(300));
  EXPECT_TRUE(first.WaitForClose());  // the idle timeout
  EXPECT_TRUE(second.WaitForClose());
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(HttpGet(server->port(), "/metrics").status, 200);
}

TEST(HttpServerConnectionsTest, LastRequestOfAConnectionClosesIt) {
  HttpServerConfig config;
  config.max_requests_per_connection = 2;
  std::unique_ptr<HttpServer> server = StartServer(config);
  ASSERT_NE(server, nullptr);
  RawHttpConnection connection(server->port());
  ASSERT_TRUE(connection.Send("GET /metrics HTTP/1.1\r\n\r\nGET /metrics HTTP/1.1\r\n\r\n"));
  EXPECT_EQ(connection.ReadResponse().header("connection"), "");
  EXPECT_EQ(connection.ReadResponse().header("connection"), "close");
  EXPECT_TRUE(connection.WaitForClose());
}

// The only connection slot holds a 16 MiB response nobody reads, then gives up.
TEST(HttpServerConnectionsTest, ClientThatReadsNothingIsDroppedAfterTheWriteTimeout) {
  HttpServerConfig config;
  config.max_connections = 1;
  config.write_timeout = absl::Milliseconds(300);
  std::unique_ptr<HttpServer> server = StartServer(config);
  ASSERT_NE(server, nullptr);
  RawHttpConnection stuck(server->port(), absl::Seconds(5), /*receive_buffer=*/4096);
  ASSERT_TRUE(stuck.Send("GET /big HTTP/1.1\r\n\r\n"));
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(HttpGet(server->port(), "/metrics").status, 0);  // refused: no slot
  const absl::Time start = absl::Now();
  int status = 0;
  while (status == 0 && absl::Now() - start < absl::Seconds(5)) {
    absl::SleepFor(absl::Milliseconds(100));
    status = HttpGet(server->port(), "/metrics").status;
  }
  EXPECT_EQ(status, 200);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

TEST(HttpServerConnectionsTest, StopReturnsPromptlyWithConnectionsOpen) {
  std::unique_ptr<HttpServer> server = StartServer(HttpServerConfig{});
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  std::vector<std::unique_ptr<RawHttpConnection>> open;
  for (int i = 0; i < 20; ++i) open.push_back(std::make_unique<RawHttpConnection>(port));
  open.push_back(std::make_unique<RawHttpConnection>(port));  // kept alive after a response
  ASSERT_TRUE(open.back()->Send("GET /metrics HTTP/1.1\r\n\r\n"));
  EXPECT_EQ(open.back()->ReadResponse().status, 200);
  open.push_back(std::make_unique<RawHttpConnection>(port));  // a response it does not read
  ASSERT_TRUE(open.back()->Send("GET /big HTTP/1.1\r\n\r\n"));
  Trickler slow(port, absl::Seconds(2));
  absl::SleepFor(absl::Milliseconds(300));
  const absl::Time start = absl::Now();
  server->Stop();
  const absl::Duration took = absl::Now() - start;
  std::printf("Stop() with 23 connections open: %.2f ms\n", absl::ToDoubleMilliseconds(took));
  EXPECT_LT(took, absl::Milliseconds(500));
  for (size_t i = 0; i + 1 < open.size(); ++i) EXPECT_TRUE(open[i]->WaitForClose()) << i;
  EXPECT_EQ(RawHttpConnection(port).connected(), false);
  server->Stop();  // idempotent
  server.reset();  // The destructor after Stop() does nothing more.
}

}  // namespace
}  // namespace tpserve
