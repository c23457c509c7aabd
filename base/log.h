// Logging for tpserve's binaries, on spdlog (Debian's libspdlog-dev, over {fmt}):
//
//   2026-12-02 18:30:01.123 info tpserve: serving on 0.0.0.0:50051
//   2026-12-02 18:30:01.456 warning tpserve_worker rank 1/2: NCCL teardown: ...
//
// Lines below warning go to stdout and warnings and errors to stderr (where each kind
// went before logging had levels), each flushed as it is written, so a supervisor that
// reads either stream sees a line as soon as it happens. Code logs with spdlog's own
// calls (`spdlog::info("serving on {}", address)`); text a client sent is escaped first
// (base/log_escape.h).
#ifndef TPSERVE_BASE_LOG_H_
#define TPSERVE_BASE_LOG_H_

#include <string>

#include "absl/status/status.h"

namespace tpserve {

// The --log-level values, least to most severe.
inline constexpr const char* kLogLevels = "debug, info, warning or error";

// InvalidArgument unless `level` is one of kLogLevels.
absl::Status ValidateLogLevel(const std::string& level);

// Sets the process's default logger: lines tagged `name` (the program), at `level` and
// above. Call once, early in main(); before it spdlog's own default (stdout, no
// levels filtered) applies.
absl::Status InitLogging(const std::string& name, const std::string& level);

// Re-tags the lines from now on (a worker, once it knows its rank: "tpserve_worker rank
// 1/2"). Safe while other threads log.
void SetLogName(const std::string& name);

}  // namespace tpserve

#endif  // TPSERVE_BASE_LOG_H_
