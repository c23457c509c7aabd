// The request log: one line per finished Generate call (gRPC and the OpenAI API alike),
// what an operator greps for when one request was slow or failed:
//
//   request 57 id=abc status=OK completions=1 prompt_tokens=12 cached_tokens=0
//   completion_tokens=32 queue_ms=1.2 ttft_ms=80.1 duration_ms=512.3 finish=length
//
// (one line). Numbers are the call's own: tokens summed over its completions (a prompt
// counts once per completion, as in the metrics), the longest queue wait, time to the
// call's first token ("-" when none came), the call's whole duration, and each
// completion's finish reason in the order they finished. A failed call adds
// error="MESSAGE". The client's request id and the error message are escaped
// (base/log_escape.h, and quotes as \x22), so they can neither forge a field nor a line.
// Pure function; any thread.
#ifndef TPSERVE_SERVER_REQUEST_LOG_H_
#define TPSERVE_SERVER_REQUEST_LOG_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "server/metrics.h"

namespace tpserve {

// `serial`: the call's number since the server started; `request_id`: the client's
// (empty: logged as "-").
std::string RequestLogLine(uint64_t serial, const std::string& request_id,
                           const absl::Status& status, const RequestRecord& record);

}  // namespace tpserve

#endif  // TPSERVE_SERVER_REQUEST_LOG_H_
