#include "rendezvous/store_server.h"

#include <sys/socket.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gloo/common/error.h"
#include "gtest/gtest.h"
#include "rendezvous/net_socket.h"
#include "rendezvous/store_testing.h"
#include "rendezvous/store_wire.h"
#include "rendezvous/tcp_store.h"

namespace tpserve {
namespace {

using store_wire::Op;
using store_wire::Writer;

TEST_F(StoreServerTest, SetThenGetReturnsBinaryValues) {
  auto client = NewClient();
  const std::string value("a\0b\xff", 4);
  ASSERT_TRUE(client->Set("k", value).ok());
  ASSERT_TRUE(client->Set("empty", "").ok());
  EXPECT_EQ(*client->Get("k", absl::Seconds(1)), value);
  EXPECT_EQ(*client->Get("empty", absl::Seconds(1)), "");
  auto other = NewClient();
  EXPECT_EQ(*other->Get("k", absl::Seconds(1)), value);
}

TEST_F(StoreServerTest, GetBlocksUntilAnotherClientSets) {
  auto reader = NewClient();
  auto writer = NewClient();
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(100));
    EXPECT_TRUE(writer->Set("late", "v").ok());
  });
  absl::StatusOr<std::string> value = reader->Get("late", absl::Seconds(5));
  setter.join();
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, "v");
}

TEST_F(StoreServerTest, GetOfMissingKeyTimesOutAndConnectionStaysUsable) {
  auto client = NewClient();
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> value = client->Get("missing", absl::Milliseconds(300));
  const absl::Duration elapsed = absl::Now() - start;
  EXPECT_EQ(value.status().code(), absl::StatusCode::kDeadlineExceeded) << value.status();
  EXPECT_GE(elapsed, absl::Milliseconds(290));
  EXPECT_LT(elapsed, absl::Seconds(2));
  ASSERT_TRUE(client->Set("after", "ok").ok());
  EXPECT_EQ(*client->Get("after", absl::Seconds(1)), "ok");
}

TEST_F(StoreServerTest, WaitReturnsOnceAllKeysExist) {
  auto waiter = NewClient();
  auto writer = NewClient();
  ASSERT_TRUE(writer->Set("a", "1").ok());
  EXPECT_EQ(waiter->Wait({"a", "b"}, absl::Milliseconds(200)).code(),
            absl::StatusCode::kDeadlineExceeded);
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(100));
    EXPECT_TRUE(writer->Set("b", "2").ok());
  });
  EXPECT_TRUE(waiter->Wait({"a", "b"}, absl::Seconds(5)).ok());
  setter.join();
}

TEST_F(StoreServerTest, AddCountsAndDeleteRemoves) {
  auto client = NewClient();
  EXPECT_EQ(*client->Add("n", 5), 5);
  EXPECT_EQ(*client->Add("n", -2), 3);
  EXPECT_EQ(*client->Get("n", absl::Seconds(1)), "3");
  ASSERT_TRUE(client->Set("text", "abc").ok());
  EXPECT_EQ(client->Add("text", 1).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(*client->Delete("n"));
  EXPECT_FALSE(*client->Delete("n"));
  EXPECT_EQ(client->Get("n", absl::Milliseconds(50)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST_F(StoreServerTest, OversizedKeysAreRejectedByTheClient) {
  auto client = NewClient();
  const std::string key(store_wire::kMaxKeyBytes + 1, 'k');
  EXPECT_EQ(client->Set(key, "v").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client->Get(key, absl::Seconds(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(client->Set("fine", "v").ok());
}

// Each entry is the raw bytes a broken client sends; the server must close that
// connection and keep serving others.
TEST_F(StoreServerTest, MalformedClientsLoseOnlyTheirConnection) {
  auto good = NewClient();
  ASSERT_TRUE(good->Set("k", "v").ok());
  const std::vector<std::string> bodies = {
      "",                                                            // no op
      std::string(1, '\x7f'),                                        // unknown op
      Writer().U8(static_cast<uint8_t>(Op::kSet)).U32(1000).bytes(),  // truncated key
      Writer().U8(static_cast<uint8_t>(Op::kGet)).U32(10).Str("k").U8(0).bytes(),  // trailing
      Writer().U8(static_cast<uint8_t>(Op::kWait)).U32(10).U32(3).Str("k").bytes(),  // 1 of 3
  };
  for (const std::string& body : bodies) {
    UniqueFd raw = RawConnection();
    ASSERT_TRUE(SendFrame(raw.get(), body, absl::Now() + absl::Seconds(1)).ok());
    absl::StatusOr<std::string> reply =
        RecvFrame(raw.get(), store_wire::kMaxFrameBytes, absl::Now() + absl::Seconds(2));
    EXPECT_EQ(reply.status().code(), absl::StatusCode::kUnavailable) << reply.status();
    EXPECT_EQ(*good->Get("k", absl::Seconds(1)), "v");
  }
  // A frame header announcing 4 GiB, and a frame cut off midway by a closing client.
  for (const std::string& bytes : {std::string("\xff\xff\xff\xff", 4),
                                   std::string("\x10\x00\x00\x00\x01\x02", 6)}) {
    UniqueFd raw = RawConnection();
    ASSERT_EQ(send(raw.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
    raw.reset();
    EXPECT_EQ(*good->Get("k", absl::Seconds(1)), "v");
  }
}

TEST_F(StoreServerTest, GlooInterfaceThrowsOnTimeout) {
  auto client = NewClient(/*timeout=*/absl::Milliseconds(100));
  client->set("g", {'x', 'y'});
  EXPECT_EQ(client->get("g"), std::vector<char>({'x', 'y'}));
  EXPECT_THROW(client->get("absent"), gloo::IoException);
  EXPECT_THROW(client->wait({"absent"}, std::chrono::milliseconds(50)), gloo::IoException);
}

TEST_F(StoreServerTest, StopUnblocksWaitingClients) {
  auto client = NewClient();
  absl::Status status;
  std::thread blocked([&] { status = client->Get("never", absl::Seconds(30)).status(); });
  absl::SleepFor(absl::Milliseconds(100));
  const absl::Time start = absl::Now();
  server_->Stop();
  blocked.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_FALSE(status.ok());
}

// The store tools and tests start for ranks of their own: no token, any client.
TEST(OpenStoreTest, ServesClientsWithAndWithoutAToken) {
  absl::StatusOr<std::unique_ptr<StoreServer>> server = StoreServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  auto plain = TcpStoreClient::Connect("127.0.0.1", (*server)->port(), absl::Seconds(5));
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_TRUE((*plain)->Set("k", "v").ok());
  auto with_token = TcpStoreClient::Connect("127.0.0.1", (*server)->port(), absl::Seconds(5),
                                            *GenerateWorkerToken());
  ASSERT_TRUE(with_token.ok()) << with_token.status();
  EXPECT_EQ(*(*with_token)->Get("k", absl::Seconds(1)), "v");
}

TEST(TcpStoreClientTest, ConnectTimesOutWithoutServer) {
  int port = 0;
  {
    absl::StatusOr<std::unique_ptr<StoreServer>> server = StoreServer::Start();
    ASSERT_TRUE(server.ok());
    port = (*server)->port();
  }
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<TcpStoreClient>> client =
      TcpStoreClient::Connect("127.0.0.1", port, absl::Milliseconds(300));
  EXPECT_EQ(client.status().code(), absl::StatusCode::kUnavailable) << client.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

}  // namespace
}  // namespace tpserve
