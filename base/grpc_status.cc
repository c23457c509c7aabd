#include "base/grpc_status.h"

#include <string>

#include "absl/strings/string_view.h"

namespace tpserve {
namespace {

constexpr absl::string_view kTruncated = "...TRUNCATED";

bool IsContinuationByte(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

std::string Capped(absl::string_view message) {
  if (message.size() <= kMaxGrpcMessageBytes) return std::string(message);
  size_t keep = kMaxGrpcMessageBytes - kTruncated.size();
  while (keep > 0 && IsContinuationByte(message[keep])) --keep;  // never half a character
  return std::string(message.substr(0, keep)) + std::string(kTruncated);
}

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), Capped(status.message()));
}

absl::Status ToAbslStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

}  // namespace tpserve
