// Untrusted text made safe for a log line: what a client sent (a request id, a stop
// string echoed in an error) can neither forge a line nor flood the log.
// Pure function; any thread.
#ifndef TPSERVE_BASE_LOG_ESCAPE_H_
#define TPSERVE_BASE_LOG_ESCAPE_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace tpserve {

// Longest escaped text LogEscape returns, before its "...[N bytes]" tail.
inline constexpr size_t kMaxLoggedBytes = 1024;

// `text` with every byte outside printable ASCII (0x20–0x7e) and every backslash written
// as \xNN (so newlines, carriage returns, escape sequences and invalid UTF-8 all show as
// text), cut at kMaxLoggedBytes of output with "...[N bytes]" naming the input's length.
std::string LogEscape(absl::string_view text);

}  // namespace tpserve

#endif  // TPSERVE_BASE_LOG_ESCAPE_H_
