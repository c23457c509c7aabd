// A StoreServer fixture for the store's tests: a store that requires a fresh worker
// token, clients that prove it, and raw sockets for requests no TcpStoreClient sends.
#ifndef TPSERVE_RENDEZVOUS_STORE_TESTING_H_
#define TPSERVE_RENDEZVOUS_STORE_TESTING_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "rendezvous/net_socket.h"
#include "rendezvous/store_server.h"
#include "rendezvous/store_wire.h"
#include "rendezvous/tcp_store.h"
#include "rendezvous/worker_token.h"

namespace tpserve {

class StoreServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    token_ = *GenerateWorkerToken();
    StoreServerOptions options;
    options.token = token_;
    absl::StatusOr<std::unique_ptr<StoreServer>> server = StoreServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }

  std::unique_ptr<TcpStoreClient> NewClient(absl::Duration timeout = absl::Seconds(5)) {
    absl::StatusOr<std::unique_ptr<TcpStoreClient>> client =
        TcpStoreClient::Connect("127.0.0.1", server_->port(), timeout, token_);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? std::move(*client) : nullptr;
  }

  // A socket past the greeting; when `authenticate`, past a successful kAuth too.
  UniqueFd RawConnection(bool authenticate = true) {
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    absl::StatusOr<UniqueFd> fd = ConnectTcp("127.0.0.1", server_->port(), deadline);
    EXPECT_TRUE(fd.ok()) << fd.status();
    if (!fd.ok()) return UniqueFd();
    absl::StatusOr<std::string> greeting =
        RecvFrame(fd->get(), store_wire::kMaxAuthFrameBytes, deadline);
    EXPECT_TRUE(greeting.ok()) << greeting.status();
    std::string nonce;
    const std::string body = greeting.ok() ? *greeting : std::string();
    store_wire::Reader in(body);
    EXPECT_TRUE(in.Str(kNonceBytes, &nonce) && in.AtEnd());
    if (authenticate) {
      const std::string proof = ProveWorkerToken(token_, ProofChannel::kStore, nonce);
      EXPECT_TRUE(Reply(fd->get(), store_wire::Writer()
                                       .U8(static_cast<uint8_t>(store_wire::Op::kAuth))
                                       .Str(proof)
                                       .bytes()) == store_wire::Code::kOk);
    }
    return std::move(*fd);
  }

  // Sends one request and returns the reply's code; its message, if any, in `message`.
  // kInvalid with message "no reply" when the server closed the connection instead.
  static store_wire::Code Reply(int fd, const std::string& request,
                                std::string* message = nullptr) {
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    absl::StatusOr<std::string> reply = SendFrame(fd, request, deadline).ok()
                                            ? RecvFrame(fd, store_wire::kMaxFrameBytes, deadline)
                                            : absl::UnavailableError("send failed");
    std::string text = "no reply";
    uint8_t code = static_cast<uint8_t>(store_wire::Code::kInvalid);
    if (reply.ok()) {
      store_wire::Reader in(*reply);
      in.U8(&code);
      in.Str(store_wire::kMaxFrameBytes, &text);
    }
    if (message != nullptr) *message = text;
    return static_cast<store_wire::Code>(code);
  }

  std::string token_;
  std::unique_ptr<StoreServer> server_;
};

}  // namespace tpserve

#endif  // TPSERVE_RENDEZVOUS_STORE_TESTING_H_
