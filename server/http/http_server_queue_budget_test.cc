// HttpServer's server-wide budget on response bytes not yet sent (max_queued_bytes_total):
// a Write() or Respond() that would pass it closes its own connection (OnClose runs,
// Write() returns false) while the other connections go on, and bytes are given back as
// they are sent and whenever a connection ends.
//
// The clients here do not read (a small SO_RCVBUF), and each stream's head carries a
// plug larger than the kernel's socket buffers can take: the server's own bytes, which
// the budget skips, so that whatever a stream writes after it stays queued in the
// server and the budget's count is exact rather than less what the kernel absorbed.
#include <algorithm>
#include <cstddef>
#include <deque>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/http/http_server.h"
#include "server/http/http_test_client.h"

namespace tpserve {
namespace {

constexpr size_t kKiB = 1 << 10;
constexpr size_t kTotal = 1 << 20;         // max_queued_bytes_total
constexpr size_t kPerStream = 512 * kKiB;  // max_queued_stream_bytes
constexpr int kStuck = 4096;               // the SO_RCVBUF of a client that does not read
constexpr char kEvents[] = "GET /events HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";

// More than the kernel can buffer for one connection: twice the send buffer's ceiling
// (tcp_wmem's last field), and at least 8 MiB. Headers of 60,000 bytes each, under
// Beast's 64 KiB per field.
HttpHeaders PlugHeaders() {
  size_t min_bytes = 0, default_bytes = 0, max_bytes = 0;
  std::ifstream("/proc/sys/net/ipv4/tcp_wmem") >> min_bytes >> default_bytes >> max_bytes;
  const size_t plug = std::max<size_t>(8 << 20, 2 * max_bytes);
  constexpr size_t kValue = 60000;
  HttpHeaders headers;
  for (size_t i = 0; i * kValue < plug; ++i) {
    headers.emplace_back(absl::StrCat("X-Plug-", i), std::string(kValue, 'p'));
  }
  return headers;
}

struct Call {
  std::shared_ptr<HttpResponder> responder;
  std::shared_ptr<absl::Notification> closed;  // its OnClose ran
};

// Every request to /events is handed to the test (Next()).
class HttpServerQueueBudgetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HttpServerConfig config;
    config.max_queued_bytes_total = kTotal;
    config.max_queued_stream_bytes = kPerStream;
    config.write_timeout = absl::Seconds(60);  // Stuck clients make no progress.
    HttpRoutes routes;
    routes.Add("GET", "/events", [this](HttpRequest, std::shared_ptr<HttpResponder> responder) {
      auto closed = std::make_shared<absl::Notification>();
      responder->OnClose([closed] { closed->Notify(); });
      absl::MutexLock lock(&mu_);
      calls_.push_back({std::move(responder), std::move(closed)});
    });
    absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start(config, routes);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }

  // Sends kEvents on `client`: the request's call, once it has reached the handler.
  std::optional<Call> Request(RawHttpConnection& client) {
    if (!client.Send(kEvents)) return std::nullopt;
    absl::MutexLock lock(&mu_);
    if (!mu_.AwaitWithTimeout(
            absl::Condition(+[](std::deque<Call>* c) { return !c->empty(); }, &calls_),
            absl::Seconds(5))) {
      return std::nullopt;
    }
    Call call = std::move(calls_.front());
    calls_.pop_front();
    return call;
  }

  // A stream to a client that does not read, behind a plug: what it writes stays queued.
  std::optional<Call> PluggedStream(RawHttpConnection& client) {
    std::optional<Call> call = Request(client);
    if (call && !call->responder->StartStream(200, "text/event-stream", plug_)) return std::nullopt;
    return call;
  }

  // Whether a whole response of `bytes` is answered in full on a fresh connection within
  // 2 s (trying again while the budget lacks it, as a connection's share may be given
  // back a moment after its OnClose ran).
  bool WholeResponseFits(size_t bytes) {
    for (const absl::Time end = absl::Now() + absl::Seconds(2); absl::Now() < end;) {
      RawHttpConnection client(server_->port());
      std::optional<Call> call = Request(client);
      if (!call) return false;
      call->responder->Respond({200, "text/plain", std::string(bytes, 'w'), {}});
      if (client.ReadResponse().body.size() == bytes) return true;
      absl::SleepFor(absl::Milliseconds(20));
    }
    return false;
  }

  const HttpHeaders plug_ = PlugHeaders();
  std::unique_ptr<HttpServer> server_;
  absl::Mutex mu_;
  std::deque<Call> calls_ ABSL_GUARDED_BY(mu_);
};

// A stream's body as the client reads it to the close: the plugged head, then `data` in
// one chunk, then the last chunk.
bool EndsWithChunk(const std::string& all, const std::string& data) {
  return absl::EndsWith(all, absl::StrCat(data, "\r\n0\r\n\r\n"));
}

TEST_F(HttpServerQueueBudgetTest, StreamThatWouldPassTheTotalIsClosedWhileTheOthersGoOn) {
  const std::string data(400 * kKiB, 'd');
  RawHttpConnection first_client(server_->port(), absl::Seconds(5), kStuck);
  RawHttpConnection second_client(server_->port(), absl::Seconds(5), kStuck);
  std::optional<Call> first = PluggedStream(first_client);
  std::optional<Call> second = PluggedStream(second_client);
  ASSERT_TRUE(first && second);
  ASSERT_TRUE(first->responder->Write(data));
  ASSERT_TRUE(second->responder->Write(data));  // 800 KiB queued of 1 MiB

  RawHttpConnection third_client(server_->port(), absl::Seconds(5), kStuck);
  std::optional<Call> third = PluggedStream(third_client);
  ASSERT_TRUE(third.has_value());
  EXPECT_FALSE(third->responder->Write(data));  // within its own 512 KiB, past the total
  EXPECT_TRUE(third->closed->WaitForNotificationWithTimeout(absl::Seconds(2)));
  EXPECT_TRUE(third->responder->closed());
  EXPECT_TRUE(third_client.WaitForClose());

  // The first two go on: they finish once their clients read.
  first->responder->End();
  second->responder->End();
  EXPECT_TRUE(EndsWithChunk(first_client.ReadToClose(), data));
  EXPECT_TRUE(EndsWithChunk(second_client.ReadToClose(), data));
  EXPECT_FALSE(first->closed->HasBeenNotified());
  EXPECT_FALSE(second->closed->HasBeenNotified());

  // All of it was given back: two new streams queue the whole total, and not a byte more.
  const std::string half(kPerStream, 'h');
  RawHttpConnection fourth_client(server_->port(), absl::Seconds(5), kStuck);
  RawHttpConnection fifth_client(server_->port(), absl::Seconds(5), kStuck);
  RawHttpConnection sixth_client(server_->port(), absl::Seconds(5), kStuck);
  std::optional<Call> fourth = PluggedStream(fourth_client);
  std::optional<Call> fifth = PluggedStream(fifth_client);
  std::optional<Call> sixth = PluggedStream(sixth_client);
  ASSERT_TRUE(fourth && fifth && sixth);
  EXPECT_TRUE(fourth->responder->Write(half));
  EXPECT_TRUE(fifth->responder->Write(half));
  EXPECT_FALSE(sixth->responder->Write("x"));
  EXPECT_TRUE(sixth->closed->WaitForNotificationWithTimeout(absl::Seconds(2)));
  EXPECT_FALSE(fourth->closed->HasBeenNotified());
}

TEST_F(HttpServerQueueBudgetTest, WholeResponseLargerThanWhatIsLeftIsRefused) {
  const std::string data(400 * kKiB, 'd');
  RawHttpConnection first_client(server_->port(), absl::Seconds(5), kStuck);
  RawHttpConnection second_client(server_->port(), absl::Seconds(5), kStuck);
  std::optional<Call> first = PluggedStream(first_client);
  std::optional<Call> second = PluggedStream(second_client);
  ASSERT_TRUE(first && second);
  ASSERT_TRUE(first->responder->Write(data));
  ASSERT_TRUE(second->responder->Write(data));  // 224 KiB left

  RawHttpConnection refused_client(server_->port());
  std::optional<Call> refused = Request(refused_client);
  ASSERT_TRUE(refused.has_value());
  refused->responder->Respond({200, "text/plain", std::string(300 * kKiB, 'r'), {}});
  EXPECT_TRUE(refused->closed->WaitForNotificationWithTimeout(absl::Seconds(2)));
  EXPECT_EQ(refused_client.ReadResponse().status, 0);  // closed without an answer

  RawHttpConnection fits_client(server_->port());
  std::optional<Call> fits = Request(fits_client);
  ASSERT_TRUE(fits.has_value());
  fits->responder->Respond({200, "text/plain", std::string(200 * kKiB, 'f'), {}});
  EXPECT_EQ(fits_client.ReadResponse().body.size(), 200 * kKiB);
  EXPECT_FALSE(fits->closed->HasBeenNotified());

  // Sent, it was given back: a new stream has those 224 KiB (and no more).
  RawHttpConnection third_client(server_->port(), absl::Seconds(5), kStuck);
  std::optional<Call> third = PluggedStream(third_client);
  ASSERT_TRUE(third.has_value());
  EXPECT_TRUE(third->responder->Write(std::string(224 * kKiB, 't')));
  EXPECT_FALSE(second->responder->Write("x"));
  EXPECT_TRUE(second->closed->WaitForNotificationWithTimeout(absl::Seconds(2)));
  EXPECT_FALSE(first->closed->HasBeenNotified());
}

// Every way a stream with bytes queued can end gives them back: after 100 of them a
// whole response of the entire budget still fits.
TEST_F(HttpServerQueueBudgetTest, ClosedStreamsLeakNothingAcrossManyCycles) {
  const std::string data(400 * kKiB, 'd');
  for (int i = 0; i < 100; ++i) {
    RawHttpConnection client(server_->port(), absl::Seconds(5), kStuck);
    std::optional<Call> call = PluggedStream(client);
    ASSERT_TRUE(call.has_value()) << "cycle " << i;
    ASSERT_TRUE(call->responder->Write(data)) << "cycle " << i;
    switch (i % 3) {
      case 0:  // The client leaves.
        client.Close();
        break;
      case 1:  // The stream passes its own bound.
        EXPECT_FALSE(call->responder->Write(std::string(200 * kKiB, 'o'))) << "cycle " << i;
        break;
      case 2:  // The handler drops it mid-stream (its OnClose goes with it).
        call->responder.reset();
        ASSERT_TRUE(client.WaitForClose()) << "cycle " << i;
        continue;
    }
    ASSERT_TRUE(call->closed->WaitForNotificationWithTimeout(absl::Seconds(2))) << "cycle " << i;
  }
  EXPECT_TRUE(WholeResponseFits(kTotal));
}

TEST(HttpServerQueueBudgetConfigTest, TotalBelowTheStreamBoundIsRejected) {
  HttpServerConfig config;
  config.max_queued_stream_bytes = 2 << 20;
  config.max_queued_bytes_total = 1 << 20;
  const absl::Status status = config.Validate();
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), ::testing::HasSubstr("max_queued_bytes_total"));
  EXPECT_FALSE(HttpServer::Start(config, HttpRoutes()).ok());
  config.max_queued_bytes_total = 2 << 20;
  EXPECT_TRUE(config.Validate().ok());
  EXPECT_TRUE(HttpServerConfig().Validate().ok());
}

}  // namespace
}  // namespace tpserve
