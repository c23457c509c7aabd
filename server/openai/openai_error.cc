#include "server/openai/openai_error.h"

#include <optional>

#include <nlohmann/json.hpp>

#include "absl/strings/cord.h"
#include "base/grpc_status.h"

namespace tpserve {
namespace {

constexpr absl::string_view kParamPayload = "tpserve.openai.param";

}  // namespace

absl::Status ParamError(absl::string_view param, absl::string_view message) {
  absl::Status status = absl::InvalidArgumentError(message);
  status.SetPayload(kParamPayload, absl::Cord(param));
  return status;
}

std::string ErrorParam(const absl::Status& status) {
  auto param = status.GetPayload(kParamPayload);
  return param.has_value() ? std::string(*param) : std::string();
}

absl::Status WithParam(absl::Status status, absl::string_view param) {
  if (!status.ok() && !status.GetPayload(kParamPayload).has_value()) {
    status.SetPayload(kParamPayload, absl::Cord(param));
  }
  return status;
}

int HttpStatusOf(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kUnimplemented:
      return 501;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

std::string ErrorTypeOf(const absl::Status& status) {
  switch (HttpStatusOf(status)) {
    case 400:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 429:
      return "rate_limit_error";
    case 503:
      return "service_unavailable";
    case 504:
      return "timeout_error";
    default:
      return "internal_error";
  }
}

std::string ErrorBody(const absl::Status& status) {
  // The same cap as gRPC messages: a message built from a request stays bounded.
  const std::string message(ToGrpcStatus(status).error_message());
  const std::string param = ErrorParam(status);
  nlohmann::json error = {{"message", message},
                          {"type", ErrorTypeOf(status)},
                          {"param", param.empty() ? nlohmann::json() : nlohmann::json(param)},
                          {"code", HttpStatusOf(status)}};
  return nlohmann::json{{"error", std::move(error)}}.dump(-1, ' ', false,
                                                            nlohmann::json::error_handler_t::replace);
}

}  // namespace tpserve
