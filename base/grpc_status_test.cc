#include "base/grpc_status.h"

#include <string>

#include "base/utf8.h"
#include "gtest/gtest.h"

namespace tpserve {
namespace {

TEST(GrpcStatusTest, KeepsCodeAndMessage) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  const struct {
    absl::Status in;
    grpc::StatusCode code;
  } cases[] = {
      {absl::InvalidArgumentError("sampling.top_p"), grpc::INVALID_ARGUMENT},
      {absl::ResourceExhaustedError("queue full"), grpc::RESOURCE_EXHAUSTED},
      {absl::UnavailableError("pool lost"), grpc::UNAVAILABLE},
      {absl::DeadlineExceededError("late"), grpc::DEADLINE_EXCEEDED},
      {absl::CancelledError("aborted"), grpc::CANCELLED},
      {absl::FailedPreconditionError("no tokenizer"), grpc::FAILED_PRECONDITION},
      {absl::InternalError("bug"), grpc::INTERNAL},
  };
  for (const auto& c : cases) {
    const grpc::Status out = ToGrpcStatus(c.in);
    EXPECT_EQ(out.error_code(), c.code) << c.in;
    EXPECT_EQ(out.error_message(), c.in.message());
    EXPECT_EQ(ToAbslStatus(out), c.in);
  }
  EXPECT_TRUE(ToAbslStatus(grpc::Status::OK).ok());
}

TEST(GrpcStatusTest, MessagesUpToOneKibPassWhole) {
  const std::string message(kMaxGrpcMessageBytes, 'x');
  EXPECT_EQ(ToGrpcStatus(absl::InvalidArgumentError(message)).error_message(), message);
}

TEST(GrpcStatusTest, LongerMessagesAreCutToOneKibAndSaySo) {
  const std::string message = "request_id " + std::string(1 << 20, 'a');
  const grpc::Status out = ToGrpcStatus(absl::InvalidArgumentError(message));
  EXPECT_EQ(out.error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_EQ(out.error_message().size(), kMaxGrpcMessageBytes);
  EXPECT_EQ(out.error_message().substr(0, 11), "request_id ");
  EXPECT_EQ(out.error_message().substr(kMaxGrpcMessageBytes - 12), "...TRUNCATED");
}

TEST(GrpcStatusTest, TheCutNeverSplitsACharacter) {
  // "é" is two bytes, "€" three: whatever the offset, the kept prefix stays valid UTF-8.
  for (const std::string unit : {"\xc3\xa9", "\xe2\x82\xac"}) {
    for (int pad = 0; pad < 3; ++pad) {
      std::string message(pad, 'p');
      while (message.size() < 2 * kMaxGrpcMessageBytes) message += unit;
      const std::string out = ToGrpcStatus(absl::InternalError(message)).error_message();
      EXPECT_LE(out.size(), kMaxGrpcMessageBytes);
      EXPECT_TRUE(ValidateUtf8(out).ok()) << "pad " << pad << " unit size " << unit.size();
      EXPECT_EQ(out.substr(out.size() - 12), "...TRUNCATED");
    }
  }
}

}  // namespace
}  // namespace tpserve
