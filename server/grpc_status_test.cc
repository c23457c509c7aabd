#include "server/grpc_status.h"

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
  }
}

}  // namespace
}  // namespace tpserve
