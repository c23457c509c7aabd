#include "client/channel.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tpserve/v1/inference.grpc.pb.h"

namespace tpserve {
namespace {

std::string Write(const std::string& name, const std::string& text) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  std::ofstream(path) << text;
  return path;
}

// GetModelInfo answers with the call's authorization metadata as the model name.
class EchoAuthorization final : public v1::Inference::Service {
 public:
  grpc::Status GetModelInfo(grpc::ServerContext* context, const v1::GetModelInfoRequest*,
                            v1::ModelInfo* info) override {
    const auto [begin, end] = context->client_metadata().equal_range("authorization");
    for (auto it = begin; it != end; ++it) {
      info->mutable_model_name()->append(it->second.data(), it->second.size());
    }
    return grpc::Status::OK;
  }
};

class ChannelTest : public ::testing::Test {
 protected:
  ChannelTest() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
  }
  ~ChannelTest() override { server_->Shutdown(); }

  // The authorization metadata the server saw from a channel opened with `flags`.
  std::string SeenAuthorization(ChannelFlags flags) {
    flags.target = "127.0.0.1:" + std::to_string(port_);
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = OpenChannel(flags);
    EXPECT_TRUE(channel.ok()) << channel.status();
    if (!channel.ok()) return "";
    grpc::ClientContext context;
    v1::ModelInfo info;
    const grpc::Status status = v1::Inference::NewStub(*channel)->GetModelInfo(&context, {}, &info);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return info.model_name();
  }

  EchoAuthorization service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(ChannelTest, SendsTheFirstApiKeyAsBearer) {
  EXPECT_EQ(SeenAuthorization({}), "");
  ChannelFlags flags;
  flags.api_key_file = Write("keys", "# client\n\nfirst-key\nsecond-key\n");
  EXPECT_EQ(SeenAuthorization(flags), "Bearer first-key");
}

TEST_F(ChannelTest, BadFlagsNameTheFlag) {
  const struct {
    ChannelFlags flags;
    std::string message;
  } cases[] = {
      {{"t", "", "/c.pem", "", ""}, "give --tls-cert-file and --tls-key-file together"},
      {{"t", "", "", "/k.pem", ""}, "give --tls-cert-file and --tls-key-file together"},
      {{"t", "/no/such/ca.pem", "", "", ""}, "--tls-ca-file /no/such/ca.pem: cannot open"},
      {{"t", "", "", "", "/no/such/keys"}, "--api-key-file /no/such/keys: cannot open"},
      {{"t", "", "", "", Write("empty_keys", "# none\n")}, "holds no key"},
      {{"t", "", "", "", "", "least_request"}, "--load-balancing \"least_request\": expected"},
  };
  for (const auto& c : cases) {
    const absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = OpenChannel(c.flags);
    ASSERT_FALSE(channel.ok()) << c.message;
    EXPECT_EQ(channel.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(channel.status().message().find(c.message), std::string::npos) << channel.status();
  }
}

// Counts the GetModelInfo calls it answers.
class Counting final : public v1::Inference::Service {
 public:
  grpc::Status GetModelInfo(grpc::ServerContext*, const v1::GetModelInfoRequest*,
                            v1::ModelInfo*) override {
    ++calls;
    return grpc::Status::OK;
  }
  std::atomic<int> calls{0};
};

// --load-balancing round_robin spreads calls over every address the target names (as
// over a headless Service's replicas); gRPC's default sends them all down one.
TEST(ChannelBalancingTest, RoundRobinReachesEveryAddress) {
  Counting services[2];
  std::unique_ptr<grpc::Server> servers[2];
  std::string target = "ipv4:";
  for (int i = 0; i < 2; ++i) {
    int port = 0;
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&services[i]);
    servers[i] = builder.BuildAndStart();
    absl::StrAppend(&target, i ? "," : "", "127.0.0.1:", port);
  }
  for (const char* policy : {"", "round_robin"}) {
    for (Counting& service : services) service.calls = 0;
    ChannelFlags flags;
    flags.target = target;
    flags.load_balancing = policy;
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = OpenChannel(flags);
    ASSERT_TRUE(channel.ok()) << channel.status();
    auto stub = v1::Inference::NewStub(*channel);
    for (int call = 0; call < 40; ++call) {
      grpc::ClientContext context;
      context.set_wait_for_ready(true);
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      v1::ModelInfo info;
      ASSERT_TRUE(stub->GetModelInfo(&context, {}, &info).ok()) << policy;
    }
    // Round robin picks among the connections ready: the second may take a few calls.
    if (std::string(policy) == "round_robin") {
      EXPECT_GE(services[0].calls, 10) << services[1].calls;
      EXPECT_GE(services[1].calls, 10) << services[0].calls;
    } else {
      EXPECT_TRUE(services[0].calls == 40 || services[1].calls == 40)
          << services[0].calls << " " << services[1].calls;
    }
  }
  for (auto& server : servers) server->Shutdown();
}

}  // namespace
}  // namespace tpserve
