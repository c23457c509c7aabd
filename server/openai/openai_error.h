// Errors of the OpenAI-compatible API: an absl::Status, optionally carrying the request
// parameter it is about, becomes OpenAI's error object with its HTTP status:
//   {"error": {"message": "...", "type": "invalid_request_error", "param": "top_p",
//              "code": null}}
// INVALID_ARGUMENT and FAILED_PRECONDITION are 400, UNAUTHENTICATED 401, NOT_FOUND 404
// (an unknown model), RESOURCE_EXHAUSTED 429 (the queue is full), UNAVAILABLE 503 (not
// serving), DEADLINE_EXCEEDED 504, UNIMPLEMENTED 501, anything else 500. Messages are
// capped as gRPC's are (base/grpc_status.h). Pure; any thread.
#ifndef TPSERVE_SERVER_OPENAI_OPENAI_ERROR_H_
#define TPSERVE_SERVER_OPENAI_OPENAI_ERROR_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tpserve {

// INVALID_ARGUMENT about `param` (a request field, e.g. "messages[2].content").
absl::Status ParamError(absl::string_view param, absl::string_view message);
// The parameter a status is about, or "" (none attached).
std::string ErrorParam(const absl::Status& status);
// `status` about `param` (kept when it already names one).
absl::Status WithParam(absl::Status status, absl::string_view param);

int HttpStatusOf(const absl::Status& status);
// OpenAI's error type for `status` ("invalid_request_error", "authentication_error",
// "not_found_error", "rate_limit_error", "service_unavailable", "internal_error").
std::string ErrorTypeOf(const absl::Status& status);
// The error object as JSON text; `status` must not be OK.
std::string ErrorBody(const absl::Status& status);

}  // namespace tpserve

#endif  // TPSERVE_SERVER_OPENAI_OPENAI_ERROR_H_
