#include "server/auth.h"

#include <fstream>
#include <memory>
#include <string>

#include "absl/synchronization/notification.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"

namespace tpserve {
namespace {

ApiKeys Keys(absl::string_view text) {
  absl::StatusOr<ApiKeys> keys = ApiKeys::Parse(text, "api-key-file", "/keys");
  EXPECT_TRUE(keys.ok()) << keys.status();
  return *std::move(keys);
}

TEST(ApiKeysTest, OneKeyPerLineSkippingBlanksAndComments) {
  const ApiKeys keys = Keys("# production\n\n  key-one  \r\nkey_two\n#key-three\n");
  EXPECT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys.first(), "key-one");
  EXPECT_TRUE(keys.Accepts("key-one"));
  EXPECT_TRUE(keys.Accepts("key_two"));
  for (absl::string_view wrong : {"", "key", "key-one ", "key-onex", "KEY-ONE", "#key-three"}) {
    EXPECT_FALSE(keys.Accepts(wrong)) << wrong;
  }
}

TEST(ApiKeysTest, BadFilesNameFlagFileAndLineButNoKey) {
  absl::StatusOr<ApiKeys> keys = ApiKeys::Parse("# only a comment\n\n", "api-key-file", "/k");
  ASSERT_FALSE(keys.ok());
  EXPECT_EQ(keys.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(keys.status().message(),
            "--api-key-file /k holds no key (one per line; blank and # lines are skipped)");
  keys = ApiKeys::Parse("good\nsecret with-space\n", "api-key-file", "/k");
  ASSERT_FALSE(keys.ok());
  EXPECT_NE(keys.status().message().find("--api-key-file /k line 2: a key must be visible ASCII"),
            std::string::npos)
      << keys.status();
  EXPECT_EQ(keys.status().message().find("secret"), std::string::npos) << keys.status();
  keys = ApiKeys::Load("api-key-file", "/no/such/keys");
  ASSERT_FALSE(keys.ok());
  EXPECT_NE(keys.status().message().find("--api-key-file /no/such/keys: cannot open"),
            std::string::npos)
      << keys.status();
}

TEST(ApiKeysTest, LoadsAFile) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/keys";
  std::ofstream(path) << "# keys\nfile-key\n";
  absl::StatusOr<ApiKeys> keys = ApiKeys::Load("api-key-file", path);
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(keys->first(), "file-key");
}

// Answers every method with ABORTED naming it, so a test sees which handler ran.
class NamingInference final : public v1::Inference::Service {
 public:
  grpc::Status Generate(grpc::ServerContext*, const v1::GenerateRequest*,
                        grpc::ServerWriter<v1::GenerateResponse>*) override {
    return Reached("Generate");
  }
  grpc::Status GenerateUnary(grpc::ServerContext*, const v1::GenerateRequest*,
                             v1::GenerateResponse*) override {
    return Reached("GenerateUnary");
  }
  grpc::Status Chat(grpc::ServerContext*, const v1::ChatRequest*,
                    grpc::ServerWriter<v1::ChatResponse>*) override {
    return Reached("Chat");
  }
  grpc::Status ChatUnary(grpc::ServerContext*, const v1::ChatRequest*,
                         v1::ChatResponse*) override {
    return Reached("ChatUnary");
  }
  grpc::Status Tokenize(grpc::ServerContext*, const v1::TokenizeRequest*,
                        v1::TokenizeResponse*) override {
    return Reached("Tokenize");
  }
  grpc::Status Detokenize(grpc::ServerContext*, const v1::DetokenizeRequest*,
                          v1::DetokenizeResponse*) override {
    return Reached("Detokenize");
  }
  grpc::Status GetModelInfo(grpc::ServerContext*, const v1::GetModelInfoRequest*,
                            v1::ModelInfo*) override {
    return Reached("GetModelInfo");
  }
  grpc::Status ResetPrefixCache(grpc::ServerContext*, const v1::ResetPrefixCacheRequest*,
                                v1::ResetPrefixCacheResponse*) override {
    return Reached("ResetPrefixCache");
  }

 private:
  static grpc::Status Reached(const std::string& method) {
    return grpc::Status(grpc::StatusCode::ABORTED, "reached " + method);
  }
};

class AuthenticatedInferenceTest : public ::testing::Test {
 protected:
  AuthenticatedInferenceTest() : service_(&inner_, Keys("first-key\nsecond-key\n")) {
    grpc::ServerBuilder builder;
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    stub_ = std::make_unique<grpc::GenericStub>(server_->InProcessChannel({}));
  }
  ~AuthenticatedInferenceTest() override { server_->Shutdown(); }

  // Calls `method` of tpserve.v1.Inference with an empty request and `authorization`
  // metadata unless it is empty.
  grpc::Status Call(const std::string& method, const std::string& authorization) {
    grpc::ClientContext context;
    if (!authorization.empty()) context.AddMetadata("authorization", authorization);
    grpc::Slice empty(std::string{});
    grpc::ByteBuffer request(&empty, 1), response;
    absl::Notification done;
    grpc::Status status;
    stub_->UnaryCall(&context, "/tpserve.v1.Inference/" + method, grpc::StubOptions(), &request,
                     &response, [&](grpc::Status s) {
                       status = std::move(s);
                       done.Notify();
                     });
    done.WaitForNotification();
    return status;
  }

  NamingInference inner_;
  AuthenticatedInference service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<grpc::GenericStub> stub_;
};

// Every method of the proto, so that one added there and not to AuthenticatedInference
// fails here (it would answer UNIMPLEMENTED with a key).
TEST_F(AuthenticatedInferenceTest, EveryMethodNeedsAnAcceptedKey) {
  const google::protobuf::ServiceDescriptor* inference =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
          v1::Inference::service_full_name());
  ASSERT_NE(inference, nullptr);
  ASSERT_GT(inference->method_count(), 0);
  for (int m = 0; m < inference->method_count(); ++m) {
    const std::string method = inference->method(m)->name();
    for (const std::string& refused :
         {std::string(), std::string("Bearer wrong-key"), std::string("Bearer first-ke"),
          std::string("first-key"), std::string("Basic first-key")}) {
      const grpc::Status status = Call(method, refused);
      EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << method << " " << refused;
      EXPECT_EQ(status.error_message().find("first-key"), std::string::npos);
    }
    for (const std::string& accepted :
         {std::string("Bearer first-key"), std::string("bearer second-key")}) {
      const grpc::Status status = Call(method, accepted);
      EXPECT_EQ(status.error_code(), grpc::StatusCode::ABORTED) << method << " " << accepted;
      EXPECT_EQ(status.error_message(), "reached " + method);
    }
  }
}

}  // namespace
}  // namespace tpserve
