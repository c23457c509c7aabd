// What a store with a worker token refuses: clients that do not prove it, and requests
// past its key, value, key-count and total-size limits (each refusal naming the limit)
// — and that refusing a huge request does not make the process hold it.
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <fstream>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "rendezvous/net_socket.h"
#include "rendezvous/store_server.h"
#include "rendezvous/store_testing.h"
#include "rendezvous/store_wire.h"
#include "rendezvous/tcp_store.h"
#include "rendezvous/worker_token.h"

namespace tpserve {
namespace {

using store_wire::Code;
using store_wire::Op;
using store_wire::Writer;

std::string SetRequest(const std::string& key, const std::string& value) {
  return Writer().U8(static_cast<uint8_t>(Op::kSet)).Str(key).Str(value).bytes();
}

// Peak resident memory of this process since the last ResetPeakRss(), in bytes.
int64_t PeakRssBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    int64_t kib = 0;
    if (absl::StartsWith(line, "VmHWM:") &&
        absl::SimpleAtoi(absl::StripSuffix(absl::StripAsciiWhitespace(line.substr(6)), " kB"),
                         &kib)) {
      return kib << 10;
    }
  }
  return -1;
}

void ResetPeakRss() { std::ofstream("/proc/self/clear_refs") << "5"; }

TEST_F(StoreServerTest, ClientsWithoutTheTokenAreRefusedBeforeAnyRequest) {
  auto none = TcpStoreClient::Connect("127.0.0.1", server_->port(), absl::Seconds(5));
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnauthenticated) << none.status();
  auto wrong = TcpStoreClient::Connect("127.0.0.1", server_->port(), absl::Seconds(5),
                                       *GenerateWorkerToken());
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kUnauthenticated) << wrong.status();
  EXPECT_NE(wrong.status().message().find("worker token"), std::string::npos) << wrong.status();

  // A raw client that skips kAuth: its set is answered kDenied and never stored, and its
  // connection is closed.
  UniqueFd raw = RawConnection(/*authenticate=*/false);
  std::string message;
  EXPECT_EQ(Reply(raw.get(), SetRequest("planted", "x"), &message), Code::kDenied);
  EXPECT_NE(message.find("not authenticated"), std::string::npos) << message;
  EXPECT_EQ(Reply(raw.get(), SetRequest("planted", "x"), &message), Code::kInvalid);
  EXPECT_EQ(message, "no reply");
  auto good = NewClient();
  EXPECT_EQ(good->Get("planted", absl::Milliseconds(50)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST_F(StoreServerTest, KeysAndValuesPastTheirLimitsAreRefusedNamingTheLimit) {
  UniqueFd raw = RawConnection();
  std::string message;
  EXPECT_EQ(Reply(raw.get(), SetRequest(std::string(store_wire::kMaxKeyBytes + 1, 'k'), "v"),
                  &message),
            Code::kLimit);
  EXPECT_NE(message.find(absl::StrCat(store_wire::kMaxKeyBytes, " bytes per key")),
            std::string::npos)
      << message;
  EXPECT_EQ(Reply(raw.get(), SetRequest("k", std::string(store_wire::kMaxValueBytes + 1, 'v')),
                  &message),
            Code::kLimit);
  EXPECT_NE(message.find(absl::StrCat(store_wire::kMaxValueBytes, " bytes per value")),
            std::string::npos)
      << message;
  // The connection survives a refusal; the largest value fits.
  EXPECT_EQ(Reply(raw.get(), SetRequest("k", std::string(store_wire::kMaxValueBytes, 'v'))),
            Code::kOk);
  // A frame past the largest valid request is refused from its header alone.
  const uint32_t n = 64u << 20;
  const std::string header = {static_cast<char>(n), static_cast<char>(n >> 8),
                              static_cast<char>(n >> 16), static_cast<char>(n >> 24)};
  ASSERT_EQ(send(raw.get(), header.data(), 4, MSG_NOSIGNAL), 4);
  absl::StatusOr<std::string> reply =
      RecvFrame(raw.get(), store_wire::kMaxFrameBytes, absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(static_cast<Code>((*reply)[0]), Code::kLimit);
  EXPECT_NE(reply->find("frame limit"), std::string::npos) << *reply;
  // The client refuses them before sending.
  auto client = NewClient();
  EXPECT_EQ(client->Set("k", std::string(store_wire::kMaxValueBytes + 1, 'v')).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(StoreServerTest, KeysPastTheCountAreRefusedNamingTheLimit) {
  auto client = NewClient();
  for (size_t i = 0; i < StoreServer::kMaxKeys; ++i) {
    ASSERT_TRUE(client->Set(absl::StrCat("k", i), "v").ok()) << i;
  }
  absl::Status past = client->Set("one_more", "v");
  EXPECT_EQ(past.code(), absl::StatusCode::kResourceExhausted) << past;
  EXPECT_NE(past.message().find(absl::StrCat(StoreServer::kMaxKeys, " keys")), std::string::npos)
      << past;
  EXPECT_EQ(client->Add("counter", 1).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(client->Set("k0", "overwritten").ok());  // no new key
  ASSERT_TRUE(*client->Delete("k1"));
  EXPECT_TRUE(client->Set("one_more", "v").ok());
}

TEST_F(StoreServerTest, BytesPastTheTotalAreRefusedNamingTheLimit) {
  auto client = NewClient();
  const std::string value(store_wire::kMaxValueBytes, 'v');
  absl::Status status;
  size_t stored = 0;
  while (stored < 100 && (status = client->Set(absl::StrCat("v", stored), value)).ok()) ++stored;
  EXPECT_EQ(stored, StoreServer::kMaxTotalBytes / store_wire::kMaxValueBytes - 1);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_NE(status.message().find(absl::StrCat(StoreServer::kMaxTotalBytes, " bytes")),
            std::string::npos)
      << status;
  ASSERT_TRUE(*client->Delete("v0"));
  EXPECT_TRUE(client->Set("v_again", value).ok());
}

// Streams a kSet of `value_bytes` from a 1 MiB buffer until the store answers; returns
// the answer's code (kOk if all was sent unanswered).
Code StreamHugeSet(int fd, size_t value_bytes) {
  const std::string head = Writer().U8(static_cast<uint8_t>(Op::kSet)).Str("big").bytes();
  const uint32_t n = static_cast<uint32_t>(head.size() + 4 + value_bytes);
  std::string pending = {static_cast<char>(n), static_cast<char>(n >> 8),
                         static_cast<char>(n >> 16), static_cast<char>(n >> 24)};
  pending += head + Writer().U32(static_cast<uint32_t>(value_bytes)).bytes();
  const std::string chunk(1 << 20, 'x');
  size_t body_sent = 0;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    pollfd pfd{fd, POLLIN | POLLOUT, 0};
    if (poll(&pfd, 1, 100) <= 0) continue;
    if (pfd.revents & (POLLIN | POLLHUP | POLLERR)) {
      absl::StatusOr<std::string> reply =
          RecvFrame(fd, store_wire::kMaxFrameBytes, absl::Now() + absl::Seconds(1));
      return reply.ok() && !reply->empty() ? static_cast<Code>((*reply)[0]) : Code::kInvalid;
    }
    if (pending.empty()) {
      if (body_sent == value_bytes) continue;
      pending = chunk.substr(0, std::min(chunk.size(), value_bytes - body_sent));
      body_sent += pending.size();
    }
    const ssize_t sent = send(fd, pending.data(), pending.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent > 0) pending.erase(0, static_cast<size_t>(sent));
  }
  return Code::kOk;
}

// Eight clients each start a 64 MiB set (half of them unauthenticated) and stream its
// bytes; the store refuses each from the frame header, so this process's peak memory
// stays far below one of them.
TEST_F(StoreServerTest, HugeWritesDoNotGrowTheProcess) {
  ResetPeakRss();
  const int64_t before = PeakRssBytes();
  ASSERT_GT(before, 0);
  for (int i = 0; i < 8; ++i) {
    const bool authenticated = i % 2 == 0;
    UniqueFd raw = RawConnection(authenticated);
    EXPECT_EQ(StreamHugeSet(raw.get(), size_t{64} << 20),
              authenticated ? Code::kLimit : Code::kDenied)
        << "write " << i;
  }
  const int64_t growth = PeakRssBytes() - before;
  EXPECT_LT(growth, int64_t{16} << 20) << "peak RSS grew by " << growth << " bytes";
  auto client = NewClient();
  EXPECT_EQ(client->Get("big", absl::Milliseconds(50)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace tpserve
