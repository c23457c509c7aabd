// HttpServer's asynchronous answers: handlers answering later from another thread,
// streamed (chunked) responses, and what ends them: the client disconnecting, a client
// too slow to read (queue bound, write timeout) and Stop().
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/http/http_server.h"
#include "server/http/http_test_client.h"

namespace tpserve {
namespace {

// When a request's OnClose callback ran.
struct CloseWatch {
  absl::Notification done;
  absl::Time at;
};

struct Call {
  HttpRequest request;
  std::shared_ptr<HttpResponder> responder;
  std::shared_ptr<CloseWatch> closed;
};

// GET /events hands each request to the test (Next()); GET /dropped drops its responder.
class HttpServerStreamingTest : public ::testing::Test {
 protected:
  void Start(HttpServerConfig config = {}) {
    HttpRoutes routes;
    routes.Add("GET", "/events", [this](HttpRequest request, std::shared_ptr<HttpResponder> r) {
      auto closed = std::make_shared<CloseWatch>();
      r->OnClose([closed] {
        closed->at = absl::Now();
        closed->done.Notify();
      });
      absl::MutexLock lock(&mu_);
      calls_.push_back({std::move(request), std::move(r), std::move(closed)});
    });
    routes.Add("GET", "/dropped", [](HttpRequest, std::shared_ptr<HttpResponder>) {});
    absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start(config, routes);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }

  // The next request that reached /events, within `timeout`.
  std::optional<Call> Next(absl::Duration timeout = absl::Seconds(5)) {
    absl::MutexLock lock(&mu_);
    if (!mu_.AwaitWithTimeout(absl::Condition(
                                  +[](std::deque<Call>* c) { return !c->empty(); }, &calls_),
                              timeout)) {
      return std::nullopt;
    }
    Call call = std::move(calls_.front());
    calls_.pop_front();
    return call;
  }

  std::unique_ptr<HttpServer> server_;
  absl::Mutex mu_;
  std::deque<Call> calls_ ABSL_GUARDED_BY(mu_);
};

constexpr char kEvents[] = "GET /events HTTP/1.1\r\nHost: t\r\n\r\n";

TEST_F(HttpServerStreamingTest, AsyncHandlerAnswersLaterFromAnotherThread) {
  Start();
  RawHttpConnection client(server_->port());
  ASSERT_TRUE(client.Send(kEvents));
  std::optional<Call> call = Next();
  ASSERT_TRUE(call.has_value());
  std::thread later([&] {
    absl::SleepFor(absl::Milliseconds(50));
    call->responder->Respond({200, "application/json", "{}"});
  });
  const RawHttpResponse r = client.ReadResponse();
  later.join();
  EXPECT_EQ(r.body, "{}");
  EXPECT_TRUE(call->responder->closed());
  client.Close();
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_FALSE(call->closed->done.HasBeenNotified());  // the response was sent in full
}

TEST_F(HttpServerStreamingTest, ChunksArriveInOrderAsTheyAreWritten) {
  Start();
  RawHttpConnection client(server_->port());
  ASSERT_TRUE(client.Send(kEvents));
  std::optional<Call> call = Next();
  ASSERT_TRUE(call.has_value());
  ASSERT_TRUE(call->responder->StartStream(200, "text/event-stream", {{"Cache-Control", "no-cache"}}));
  const RawHttpResponse head = client.ReadHead();
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.header("content-type"), "text/event-stream");
  EXPECT_EQ(head.header("cache-control"), "no-cache");
  EXPECT_EQ(head.header("transfer-encoding"), "chunked");
  for (int i = 0; i < 5; ++i) {
    const std::string event = absl::StrCat("data: ", i, "\n\n");
    ASSERT_TRUE(call->responder->Write(event));
    EXPECT_EQ(client.ReadChunk(), event);  // before End()
  }
  call->responder->End();
  EXPECT_EQ(client.ReadChunk(), "");
  // The connection serves its next request.
  ASSERT_TRUE(client.Send(kEvents));
  std::optional<Call> second = Next();
  ASSERT_TRUE(second.has_value());
  second->responder->Respond({200, "text/plain", "again"});
  EXPECT_EQ(client.ReadResponse().body, "again");
  EXPECT_FALSE(call->closed->done.HasBeenNotified());
}

TEST_F(HttpServerStreamingTest, PipelinedRequestWaitsForTheStreamToEnd) {
  Start();
  RawHttpConnection client(server_->port());
  ASSERT_TRUE(client.Send(absl::StrCat(kEvents, kEvents)));
  std::optional<Call> first = Next();
  ASSERT_TRUE(first.has_value());
  ASSERT_TRUE(first->responder->StartStream(200, "text/event-stream"));
  ASSERT_TRUE(first->responder->Write("data: 1\n\n"));
  EXPECT_FALSE(Next(absl::Milliseconds(100)).has_value());
  first->responder->End();
  std::optional<Call> second = Next();
  ASSERT_TRUE(second.has_value());
  second->responder->Respond({200, "text/plain", "second"});
  EXPECT_EQ(client.ReadResponse().body, "data: 1\n\n");
  EXPECT_EQ(client.ReadResponse().body, "second");
}

TEST_F(HttpServerStreamingTest, ClientDisconnectMidStreamRunsOnCloseAtOnce) {
  Start();
  RawHttpConnection client(server_->port());
  ASSERT_TRUE(client.Send(kEvents));
  std::optional<Call> call = Next();
  ASSERT_TRUE(call.has_value());
  ASSERT_TRUE(call->responder->StartStream(200, "text/event-stream"));
  ASSERT_TRUE(call->responder->Write("data: 1\n\n"));
  EXPECT_EQ(client.ReadHead().status, 200);
  EXPECT_EQ(client.ReadChunk(), "data: 1\n\n");
  const absl::Time gone = absl::Now();
  client.Close();
  ASSERT_TRUE(call->closed->done.WaitForNotificationWithTimeout(absl::Seconds(2)));
  EXPECT_LT(call->closed->at - gone, absl::Milliseconds(100));
  EXPECT_FALSE(call->responder->Write("data: 2\n\n"));
  EXPECT_TRUE(call->responder->closed());
  call->responder->End();  // does nothing
}

TEST_F(HttpServerStreamingTest, ClientDisconnectBeforeTheAnswerRunsOnClose) {
  Start();
  RawHttpConnection client(server_->port());
  ASSERT_TRUE(client.Send(kEvents));
  std::optional<Call> call = Next();
  ASSERT_TRUE(call.has_value());
  client.Close();
  ASSERT_TRUE(call->closed->done.WaitForNotificationWithTimeout(absl::Seconds(2)));
  EXPECT_FALSE(call->responder->StartStream(200, "text/event-stream"));
  call->responder->Respond({});  // does nothing
}

// The client's socket buffers fill, then the stream's queue passes its bound.
TEST_F(HttpServerStreamingTest, ClientTooSlowForTheQueueBoundIsDropped) {
  HttpServerConfig config;
  config.max_queued_stream_bytes = 1 << 20;
  config.write_timeout = absl::Seconds(30);
  Start(config);
  RawHttpConnection stuck(server_->port(), absl::Seconds(5), /*receive_buffer=*/4096);
  ASSERT_TRUE(stuck.Send(kEvents));
  std::optional<Call> call = Next();
  ASSERT_TRUE(call.has_value());
  ASSERT_TRUE(call->responder->StartStream(200, "text/event-stream"));
  const std::string event(64 << 10, 'e');
  size_t written = 0;
  while (call->responder->Write(event) && written < (256u << 20)) written += event.size();
  std::printf("the queue bound refused a write after %zu KiB\n", written >> 10);
  EXPECT_LT(written, 256u << 20);
  EXPECT_TRUE(call->closed->done.WaitForNotificationWithTimeout(absl::Seconds(2)));
  EXPECT_TRUE(call->responder->closed());
}

TEST_F(HttpServerStreamingTest, ClientThatStopsReadingIsDroppedAfterTheWriteTimeout) {
  HttpServerConfig config;
  config.max_queued_stream_bytes = 256 << 20;
  config.write_timeout = absl::Milliseconds(300);
  Start(config);
  RawHttpConnection stuck(server_->port(), absl::Seconds(5), /*receive_buffer=*/4096);
  ASSERT_TRUE(stuck.Send(kEvents));
  std::optional<Call> call = Next();
  ASSERT_TRUE(call.has_value());
  ASSERT_TRUE(call->responder->StartStream(200, "text/event-stream"));
  const std::string event(64 << 10, 'e');
  for (int i = 0; i < 256; ++i) ASSERT_TRUE(call->responder->Write(event));  // 16 MiB
  const absl::Time written = absl::Now();
  ASSERT_TRUE(call->closed->done.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_LT(call->closed->at - written, absl::Seconds(3));
  EXPECT_FALSE(call->responder->Write(event));
}

TEST_F(HttpServerStreamingTest, StopWithStreamsOpenReturnsQuicklyAndRunsOnClose) {
  Start();
  std::vector<std::unique_ptr<RawHttpConnection>> clients;
  std::vector<Call> calls;
  for (int i = 0; i < 10; ++i) {
    clients.push_back(std::make_unique<RawHttpConnection>(server_->port()));
    ASSERT_TRUE(clients.back()->Send(kEvents));
    std::optional<Call> call = Next();
    ASSERT_TRUE(call.has_value());
    ASSERT_TRUE(call->responder->StartStream(200, "text/event-stream"));
    ASSERT_TRUE(call->responder->Write("data: 1\n\n"));
    calls.push_back(*std::move(call));
  }
  std::optional<Call> unanswered;  // a handler still working
  RawHttpConnection waiting(server_->port());
  ASSERT_TRUE(waiting.Send(kEvents));
  unanswered = Next();
  ASSERT_TRUE(unanswered.has_value());
  calls.push_back(*std::move(unanswered));
  const absl::Time start = absl::Now();
  server_->Stop();
  const absl::Duration took = absl::Now() - start;
  std::printf("Stop() with 11 streams open: %.2f ms\n", absl::ToDoubleMilliseconds(took));
  EXPECT_LT(took, absl::Milliseconds(500));
  for (Call& call : calls) {
    EXPECT_TRUE(call.closed->done.HasBeenNotified());
    EXPECT_FALSE(call.responder->Write("data: 2\n\n"));
  }
  for (auto& client : clients) EXPECT_TRUE(client->WaitForClose());
}

TEST_F(HttpServerStreamingTest, HeadOfAStreamGetsItsHeadersOnly) {
  Start();
  RawHttpConnection client(server_->port());
  ASSERT_TRUE(client.Send("HEAD /events HTTP/1.1\r\n\r\n"));
  std::optional<Call> call = Next();
  ASSERT_TRUE(call.has_value());
  ASSERT_TRUE(call->responder->StartStream(200, "text/event-stream"));
  EXPECT_TRUE(call->responder->Write("data: 1\n\n"));
  call->responder->End();
  const RawHttpResponse head = client.ReadResponse(/*head=*/true);
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.header("content-type"), "text/event-stream");
  // No body came: the next response follows at once.
  ASSERT_TRUE(client.Send("GET /dropped HTTP/1.1\r\n\r\n"));
  EXPECT_EQ(client.ReadResponse().status, 500);
}

TEST_F(HttpServerStreamingTest, DroppedResponderGets500) {
  Start();
  const RawHttpResponse r = HttpGet(server_->port(), "/dropped");
  EXPECT_EQ(r.status, 500);
  EXPECT_EQ(r.body, "the request was dropped without an answer\n");
}

TEST_F(HttpServerStreamingTest, Http10StreamIsEndedByTheClose) {
  Start();
  RawHttpConnection client(server_->port());
  ASSERT_TRUE(client.Send("GET /events HTTP/1.0\r\n\r\n"));
  std::optional<Call> call = Next();
  ASSERT_TRUE(call.has_value());
  ASSERT_TRUE(call->responder->StartStream(200, "text/event-stream"));
  ASSERT_TRUE(call->responder->Write("data: a\n\n"));
  ASSERT_TRUE(call->responder->Write("data: b\n\n"));
  call->responder->End();
  const RawHttpResponse head = client.ReadHead();
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.header("transfer-encoding"), "");
  EXPECT_EQ(client.ReadToClose(), "data: a\n\ndata: b\n\n");
}

}  // namespace
}  // namespace tpserve
