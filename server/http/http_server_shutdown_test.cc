// HttpServer::Shutdown(): a stream under way is sent in full before its connection
// closes, idle connections close at once, new connections are refused, a request that
// arrives meanwhile gets 503, and a response that never ends holds it only to its
// deadline.
#include <atomic>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/http/http_server.h"
#include "server/http/http_test_client.h"

namespace tpserve {
namespace {

constexpr char kEvents[] = "GET /events HTTP/1.1\r\nHost: t\r\n\r\n";
constexpr char kFast[] = "GET /fast HTTP/1.1\r\nHost: t\r\n\r\n";
constexpr char kShuttingDown[] = "the server is shutting down\n";

struct Call {
  std::shared_ptr<HttpResponder> responder;
  std::shared_ptr<absl::Notification> closed;  // its OnClose ran
};

// Shutdown() on a thread of its own, for the tests that act while it waits.
class BackgroundShutdown {
 public:
  BackgroundShutdown(HttpServer* server, absl::Duration timeout)
      : thread_([this, server, timeout] {
          server->Shutdown(absl::Now() + timeout);
          at_ = absl::Now();
          done_.Notify();
        }) {}
  ~BackgroundShutdown() { thread_.join(); }

  bool returned() const { return done_.HasBeenNotified(); }
  // When it returned, waiting up to `timeout` for that; nullopt if it did not.
  std::optional<absl::Time> Await(absl::Duration timeout) {
    if (!done_.WaitForNotificationWithTimeout(timeout)) return std::nullopt;
    return at_;
  }

 private:
  absl::Notification done_;
  absl::Time at_;
  std::thread thread_;
};

// GET /events hands each request to the test (Next()); GET /fast answers "ok" at once.
class HttpServerShutdownTest : public ::testing::Test {
 protected:
  void Start(HttpServerConfig config = {}) {
    HttpRoutes routes;
    routes.Add("GET", "/events", [this](HttpRequest, std::shared_ptr<HttpResponder> r) {
      auto closed = std::make_shared<absl::Notification>();
      r->OnClose([closed] { closed->Notify(); });
      absl::MutexLock lock(&mu_);
      calls_.push_back({std::move(r), std::move(closed)});
    });
    routes.Add("GET", "/fast", [this](HttpRequest, std::shared_ptr<HttpResponder> r) {
      ++fast_calls_;
      r->Respond({200, "text/plain", "ok"});
    });
    absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start(config, routes);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }

  // The next request that reached /events.
  std::optional<Call> Next() {
    absl::MutexLock lock(&mu_);
    if (!mu_.AwaitWithTimeout(absl::Condition(
                                  +[](std::deque<Call>* c) { return !c->empty(); }, &calls_),
                              absl::Seconds(5))) {
      return std::nullopt;
    }
    Call call = std::move(calls_.front());
    calls_.pop_front();
    return call;
  }

  // A keep-alive connection that has been answered once and is now idle.
  std::unique_ptr<RawHttpConnection> IdleConnection() {
    auto client = std::make_unique<RawHttpConnection>(server_->port());
    EXPECT_TRUE(client->Send(kFast));
    EXPECT_EQ(client->ReadResponse().body, "ok");
    return client;
  }

  // Once `idle` (from before Shutdown) has been closed, every connection has been told
  // to drain; the margin lets the other connections' strands run their drain too.
  static void AwaitDrain(RawHttpConnection& idle) {
    ASSERT_TRUE(idle.WaitForClose());
    absl::SleepFor(absl::Milliseconds(200));
  }

  std::unique_ptr<HttpServer> server_;
  std::atomic<int> fast_calls_{0};
  absl::Mutex mu_;
  std::deque<Call> calls_ ABSL_GUARDED_BY(mu_);
};

TEST_F(HttpServerShutdownTest, StreamUnderWayIsSentInFullBeforeTheClose) {
  HttpServerConfig config;
  config.write_timeout = absl::Seconds(30);  // The client reads nothing for a while.
  config.max_queued_stream_bytes = 64 << 20;
  Start(config);
  std::unique_ptr<RawHttpConnection> idle = IdleConnection();
  RawHttpConnection client(server_->port(), absl::Seconds(10), /*receive_buffer=*/4096);
  ASSERT_TRUE(client.Send(kEvents));
  std::optional<Call> call = Next();
  ASSERT_TRUE(call.has_value());
  ASSERT_TRUE(call->responder->StartStream(200, "text/event-stream"));
  // 16 MiB that a client with a 4 KiB receive buffer has not read: more than the
  // kernel's send buffer (at most 4 MiB by default) holds, so most is in the server's
  // queue.
  std::deque<std::string> written;
  for (int i = 0; i < 512; ++i) {
    written.push_back(absl::StrCat("data: ", i, " ", std::string(32 << 10, 'x'), "\n\n"));
    ASSERT_TRUE(call->responder->Write(written.back()));
  }
  BackgroundShutdown shutdown(server_.get(), absl::Seconds(30));
  AwaitDrain(*idle);
  for (int i = 512; i < 515; ++i) {  // The stream goes on while Shutdown waits.
    written.push_back(absl::StrCat("data: ", i, "\n\n"));
    ASSERT_TRUE(call->responder->Write(written.back()));
  }
  EXPECT_FALSE(shutdown.returned());
  call->responder->End();
  const absl::Time ended = absl::Now();

  const RawHttpResponse head = client.ReadHead();
  EXPECT_EQ(head.status, 200);
  while (!written.empty()) {
    ASSERT_EQ(client.ReadChunk(), written.front()) << written.size() << " chunks left";
    written.pop_front();
  }
  EXPECT_EQ(client.ReadChunk(), "");  // the final chunk
  EXPECT_TRUE(client.WaitForClose());
  const std::optional<absl::Time> returned = shutdown.Await(absl::Seconds(5));
  ASSERT_TRUE(returned.has_value());
  std::printf("Shutdown returned %.1f ms after End()\n",
              absl::ToDoubleMilliseconds(*returned - ended));
  EXPECT_LT(*returned - ended, absl::Seconds(3));  // not at the deadline, 30 s away
  EXPECT_FALSE(call->closed->HasBeenNotified());   // the response was sent in full
}

TEST_F(HttpServerShutdownTest, IdleConnectionsCloseAtOnceAndNewOnesAreRefused) {
  Start();
  std::unique_ptr<RawHttpConnection> idle = IdleConnection();
  std::unique_ptr<RawHttpConnection> idle_too = IdleConnection();
  RawHttpConnection busy(server_->port());
  ASSERT_TRUE(busy.Send(kEvents));
  std::optional<Call> call = Next();  // holds Shutdown until it is answered
  ASSERT_TRUE(call.has_value());

  const absl::Time start = absl::Now();
  BackgroundShutdown shutdown(server_.get(), absl::Seconds(30));
  ASSERT_TRUE(idle->WaitForClose());
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(500));
  AwaitDrain(*idle);
  EXPECT_FALSE(shutdown.returned());

  // The documented answer to a request on an idle connection once Shutdown has begun:
  // none, the connection has been closed (as after idle_timeout).
  idle_too->Send(kFast);  // may fail: the server has closed it
  EXPECT_EQ(idle_too->ReadResponse().status, 0);
  // A new connection is refused, or closed unanswered.
  RawHttpConnection late(server_->port(), absl::Seconds(2));
  if (late.connected() && late.Send(kFast)) {
    EXPECT_EQ(late.ReadResponse().status, 0);
  }
  EXPECT_EQ(fast_calls_.load(), 2);  // the two IdleConnection()s only

  call->responder->Respond({200, "text/plain", "late"});
  const RawHttpResponse answer = busy.ReadResponse();
  EXPECT_EQ(answer.body, "late");
  EXPECT_EQ(answer.header("connection"), "close");  // its head had not gone yet
  EXPECT_TRUE(busy.WaitForClose());
  EXPECT_TRUE(shutdown.Await(absl::Seconds(3)).has_value());
}

TEST_F(HttpServerShutdownTest, RequestArrivingMeanwhileGets503) {
  Start();
  std::unique_ptr<RawHttpConnection> idle = IdleConnection();
  RawHttpConnection busy(server_->port());
  ASSERT_TRUE(busy.Send(kEvents));
  std::optional<Call> call = Next();
  ASSERT_TRUE(call.has_value());
  RawHttpConnection partial(server_->port());
  ASSERT_TRUE(partial.Send("GET /fast HTTP/1.1\r\nHost: t\r\n"));  // not the end of its head
  absl::SleepFor(absl::Milliseconds(100));

  BackgroundShutdown shutdown(server_.get(), absl::Seconds(30));
  AwaitDrain(*idle);
  ASSERT_TRUE(partial.Send("\r\n"));
  const RawHttpResponse refused = partial.ReadResponse();
  EXPECT_EQ(refused.status, 503);
  EXPECT_EQ(refused.header("connection"), "close");
  EXPECT_EQ(refused.body, kShuttingDown);
  EXPECT_TRUE(partial.WaitForClose());
  EXPECT_EQ(fast_calls_.load(), 1);  // IdleConnection()'s only
  EXPECT_FALSE(shutdown.returned());

  call->responder->Respond({200, "text/plain", "done"});
  EXPECT_EQ(busy.ReadResponse().body, "done");
  EXPECT_TRUE(shutdown.Await(absl::Seconds(3)).has_value());
}

TEST_F(HttpServerShutdownTest, PipelinedRequestBehindAStreamGets503) {
  Start();
  std::unique_ptr<RawHttpConnection> idle = IdleConnection();
  RawHttpConnection client(server_->port());
  ASSERT_TRUE(client.Send(absl::StrCat(kEvents, kFast)));
  std::optional<Call> call = Next();
  ASSERT_TRUE(call.has_value());
  ASSERT_TRUE(call->responder->StartStream(200, "text/event-stream"));
  ASSERT_TRUE(call->responder->Write("data: 1\n\n"));
  EXPECT_EQ(client.ReadHead().header("connection"), "");  // keep-alive, before Shutdown
  EXPECT_EQ(client.ReadChunk(), "data: 1\n\n");

  BackgroundShutdown shutdown(server_.get(), absl::Seconds(30));
  AwaitDrain(*idle);
  ASSERT_TRUE(call->responder->Write("data: 2\n\n"));
  call->responder->End();
  EXPECT_EQ(client.ReadChunk(), "data: 2\n\n");
  EXPECT_EQ(client.ReadChunk(), "");
  const RawHttpResponse refused = client.ReadResponse();
  EXPECT_EQ(refused.status, 503);
  EXPECT_EQ(refused.header("connection"), "close");
  EXPECT_TRUE(client.WaitForClose());
  EXPECT_EQ(fast_calls_.load(), 1);
  EXPECT_TRUE(shutdown.Await(absl::Seconds(3)).has_value());
}

TEST_F(HttpServerShutdownTest, ResponsesThatNeverEndHoldItOnlyToTheDeadline) {
  Start();
  RawHttpConnection unanswered(server_->port());
  ASSERT_TRUE(unanswered.Send(kEvents));
  std::optional<Call> pending = Next();  // a handler that never answers
  ASSERT_TRUE(pending.has_value());
  RawHttpConnection streaming(server_->port());
  ASSERT_TRUE(streaming.Send(kEvents));
  std::optional<Call> stream = Next();  // a stream that never ends
  ASSERT_TRUE(stream.has_value());
  ASSERT_TRUE(stream->responder->StartStream(200, "text/event-stream"));
  ASSERT_TRUE(stream->responder->Write("data: 1\n\n"));

  const absl::Time deadline = absl::Now() + absl::Milliseconds(500);
  server_->Shutdown(deadline);
  const absl::Duration late = absl::Now() - deadline;
  std::printf("Shutdown returned %.1f ms after its deadline\n", absl::ToDoubleMilliseconds(late));
  EXPECT_GT(late, absl::Milliseconds(-100));
  EXPECT_LT(late, absl::Milliseconds(100));
  EXPECT_TRUE(pending->closed->HasBeenNotified());
  EXPECT_TRUE(stream->closed->HasBeenNotified());
  EXPECT_FALSE(stream->responder->Write("data: 2\n\n"));
  EXPECT_TRUE(unanswered.WaitForClose());
  EXPECT_TRUE(streaming.WaitForClose());
}

TEST_F(HttpServerShutdownTest, ShutdownThenStopIsHarmless) {
  Start();
  std::unique_ptr<RawHttpConnection> idle = IdleConnection();
  const absl::Time start = absl::Now();
  server_->Shutdown(start + absl::Seconds(30));  // nothing under way: at once
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(500));
  EXPECT_TRUE(idle->WaitForClose());
  server_->Shutdown(absl::Now() + absl::Seconds(30));
  server_->Stop();
  RawHttpConnection late(server_->port(), absl::Seconds(1));
  EXPECT_FALSE(late.connected());
  server_.reset();
}

TEST_F(HttpServerShutdownTest, StopThenShutdownIsHarmless) {
  Start();
  server_->Stop();
  const absl::Time start = absl::Now();
  server_->Shutdown(start + absl::Seconds(30));
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(100));
  server_.reset();
}

}  // namespace
}  // namespace tpserve
