// HttpServer's server-wide budget for request bodies (max_buffered_body_bytes): an upload
// that would pass it gets 503 and its connection closes, what each upload held is given
// back on every way out (its handler, its 503, its request timeout), and requests
// without a body go on meanwhile. Uploads hold their share deterministically by asking
// "Expect: 100-continue": the server reserves a body before it says 100 Continue.
#include <cstddef>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/http/http_server.h"
#include "server/http/http_test_client.h"

namespace tpserve {
namespace {

using ::testing::HasSubstr;

constexpr size_t kKiB = 1 << 10;

// The uploads POSTed to /upload, held until the test answers them.
class HeldUploads {
 public:
  HttpAsyncHandler Handler() {
    return [this](HttpRequest request, std::shared_ptr<HttpResponder> responder) {
      absl::MutexLock lock(&mu_);
      ++reached_;
      held_.emplace_back(request.body.size(), std::move(responder));
    };
  }
  // Until `count` uploads in all have reached the handler; false after 5 s.
  bool AwaitReached(size_t count) {
    absl::MutexLock lock(&mu_);
    const auto reached = [this, count]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return reached_ >= count;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&reached), absl::Seconds(5));
  }
  // Each held upload gets 200 with its body's size.
  void AnswerAll() {
    absl::MutexLock lock(&mu_);
    for (auto& [size, responder] : held_) {
      responder->Respond({200, "text/plain", absl::StrCat(size)});
    }
    held_.clear();
  }

 private:
  absl::Mutex mu_;
  size_t reached_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::pair<size_t, std::shared_ptr<HttpResponder>>> held_ ABSL_GUARDED_BY(mu_);
};

// POST /upload is held; every other request gets "pong".
std::unique_ptr<HttpServer> StartServer(const HttpServerConfig& config, HeldUploads& uploads) {
  HttpRoutes routes;
  routes.Add("POST", "/upload", uploads.Handler());
  routes.SetFallback([](const HttpRequest&) { return HttpResponse{200, "text/plain", "pong"}; });
  absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start(config, routes);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

HttpServerConfig SmallBudget(size_t budget, size_t max_body) {
  HttpServerConfig config;
  config.max_buffered_body_bytes = budget;
  config.max_body_bytes = max_body;
  return config;
}

std::string UploadHead(size_t length, bool expect_continue) {
  return absl::StrCat("POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: ", length, "\r\n",
                      expect_continue ? "Expect: 100-continue\r\n" : "", "\r\n");
}

// Sends an upload's head and waits for 100 Continue: its `length` is then held.
void Reserve(RawHttpConnection& connection, size_t length) {
  ASSERT_TRUE(connection.Send(UploadHead(length, /*expect_continue=*/true)));
  ASSERT_EQ(connection.ReadHead().status, 100);
}

// The server's refusal: 503, "Connection: close", the limit named, then the close.
void ExpectRefused(RawHttpConnection& connection, size_t budget) {
  const RawHttpResponse refused = connection.ReadResponse();
  EXPECT_EQ(refused.status, 503);
  EXPECT_EQ(refused.header("connection"), "close");
  EXPECT_THAT(refused.body, HasSubstr(absl::StrCat(budget, " bytes (max_buffered_body_bytes)")));
  EXPECT_TRUE(connection.WaitForClose());
}

TEST(HttpServerBudgetTest, UploadPastTheBudgetGets503WhileTheOthersGoOn) {
  HeldUploads uploads;
  std::unique_ptr<HttpServer> server = StartServer(SmallBudget(1 << 20, 512 * kKiB), uploads);
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  const std::string body(400 * kKiB, 'b');
  RawHttpConnection first(port);
  RawHttpConnection second(port);
  Reserve(first, body.size());
  Reserve(second, body.size());

  RawHttpConnection third(port);  // 1,200 KiB in all: refused on its head
  third.Send(UploadHead(body.size(), false) + body);  // may fail: the server closes
  ExpectRefused(third, 1 << 20);
  EXPECT_EQ(HttpGet(port, "/ping").body, "pong");  // a head holds nothing

  ASSERT_TRUE(first.Send(body));
  ASSERT_TRUE(second.Send(body));
  ASSERT_TRUE(uploads.AwaitReached(2));
  // Their handlers have returned, so the bodies are theirs now, no longer the budget's:
  // a new upload is read while both are still held.
  RawHttpConnection fourth(port);
  ASSERT_TRUE(fourth.Send(UploadHead(body.size(), false) + body));
  ASSERT_TRUE(uploads.AwaitReached(3));
  uploads.AnswerAll();
  for (RawHttpConnection* connection : {&first, &second, &fourth}) {
    EXPECT_EQ(connection->ReadResponse().body, absl::StrCat(body.size()));
  }
  // Once they were answered, another one (on a kept-alive connection) too.
  ASSERT_TRUE(first.Send(UploadHead(body.size(), false) + body));
  ASSERT_TRUE(uploads.AwaitReached(4));
  uploads.AnswerAll();
  EXPECT_EQ(first.ReadResponse().status, 200);
}

TEST(HttpServerBudgetTest, ChunkedUploadThatGrowsPastTheBudgetGets503) {
  HeldUploads uploads;
  std::unique_ptr<HttpServer> server = StartServer(SmallBudget(1 << 20, 512 * kKiB), uploads);
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  RawHttpConnection first(port);
  RawHttpConnection second(port);
  Reserve(first, 400 * kKiB);
  Reserve(second, 400 * kKiB);  // 224 KiB left

  const std::string chunk = absl::StrCat("10000\r\n", std::string(64 * kKiB, 'c'), "\r\n");
  RawHttpConnection growing(port);
  const std::string chunked_head =
      "POST /upload HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n";
  ASSERT_TRUE(growing.Send(chunked_head));
  for (int i = 0; i < 7 && growing.Send(chunk); ++i) {  // 448 KiB, within max_body_bytes
  }
  ExpectRefused(growing, 1 << 20);

  // What it held (up to 224 KiB) was given back: 200 KiB fit beside the 800 held.
  RawHttpConnection third(port);
  Reserve(third, 200 * kKiB);
  ASSERT_TRUE(first.Send(std::string(400 * kKiB, 'b')));
  ASSERT_TRUE(second.Send(std::string(400 * kKiB, 'b')));
  ASSERT_TRUE(third.Send(std::string(200 * kKiB, 'b')));
  ASSERT_TRUE(uploads.AwaitReached(3));
  uploads.AnswerAll();
  for (RawHttpConnection* connection : {&first, &second, &third}) {
    EXPECT_EQ(connection->ReadResponse().status, 200);
  }

  // A chunked upload that stays within the budget is read whole.
  RawHttpConnection within(port);
  std::string chunked = chunked_head;
  for (int i = 0; i < 7; ++i) chunked += chunk;
  ASSERT_TRUE(within.Send(chunked + "0\r\n\r\n"));
  ASSERT_TRUE(uploads.AwaitReached(4));
  uploads.AnswerAll();
  EXPECT_EQ(within.ReadResponse().body, absl::StrCat(7 * 64 * kKiB));
}

// A slow upload holds the whole budget until its request timeout cuts it off (408);
// then the budget is whole again.
TEST(HttpServerBudgetTest, UploadCutOffByTheRequestTimeoutGivesItsShareBack) {
  HeldUploads uploads;
  HttpServerConfig config = SmallBudget(512 * kKiB, 512 * kKiB);
  config.request_timeout = absl::Seconds(1);
  std::unique_ptr<HttpServer> server = StartServer(config, uploads);
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  const std::string full(512 * kKiB, 'f');
  RawHttpConnection slow(port);
  Reserve(slow, full.size());
  std::thread trickle([&slow] {
    const absl::Time end = absl::Now() + absl::Seconds(3);
    while (absl::Now() < end && slow.Send("x")) absl::SleepFor(absl::Milliseconds(50));
  });

  RawHttpConnection refused(port);
  ASSERT_TRUE(refused.Send(UploadHead(full.size(), /*expect_continue=*/true)));
  ExpectRefused(refused, 512 * kKiB);
  // Requests without a body hold nothing, so they go on with the budget spent.
  EXPECT_EQ(HttpGet(port, "/ping").body, "pong");
  RawHttpConnection empty(port);
  ASSERT_TRUE(empty.Send("POST /ping HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n"));
  EXPECT_EQ(empty.ReadResponse().body, "pong");

  EXPECT_EQ(slow.ReadResponse().status, 408);
  // Given back before the 408 was sent, not when the connection closes after it.
  RawHttpConnection after(port);
  Reserve(after, full.size());
  EXPECT_TRUE(slow.WaitForClose());
  trickle.join();
  ASSERT_TRUE(after.Send(full));
  ASSERT_TRUE(uploads.AwaitReached(1));
  uploads.AnswerAll();
  EXPECT_EQ(after.ReadResponse().body, absl::StrCat(full.size()));
}

TEST(HttpServerBudgetTest, ClientThatLeavesMidUploadGivesItsShareBack) {
  HeldUploads uploads;
  std::unique_ptr<HttpServer> server = StartServer(SmallBudget(512 * kKiB, 512 * kKiB), uploads);
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  RawHttpConnection gone(port);
  Reserve(gone, 512 * kKiB);
  ASSERT_TRUE(gone.Send(std::string(100 * kKiB, 'g')));
  gone.Close();
  // The server notices the close within milliseconds; until then the budget is spent.
  int status = 0;
  for (const absl::Time end = absl::Now() + absl::Seconds(2); status != 100 && absl::Now() < end;) {
    RawHttpConnection after(port);
    ASSERT_TRUE(after.Send(UploadHead(512 * kKiB, /*expect_continue=*/true)));
    status = after.ReadHead().status;
    if (status != 100) absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(status, 100);
}

TEST(HttpServerBudgetTest, BudgetBelowTheBodyLimitIsRejected) {
  HttpServerConfig config = SmallBudget(1 << 20, 2 << 20);
  const absl::Status status = config.Validate();
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("max_buffered_body_bytes"));
  EXPECT_TRUE(SmallBudget(1 << 20, 1 << 20).Validate().ok());
  HeldUploads uploads;
  HttpRoutes routes;
  routes.Add("POST", "/upload", uploads.Handler());
  EXPECT_FALSE(HttpServer::Start(config, routes).ok());
}

}  // namespace
}  // namespace tpserve
