// The periodic stats line tpserve logs (--log-stats-interval-s), as vLLM's engine does:
//
//   stats: prompt 412.0 tok/s, generation 48.3 tok/s, running 32, waiting 4,
//   KV cache 61.2% (167/272 blocks), prefix cache hits 50.0%, finished 12 calls
//
// (one line), each rate over the interval since the previous line. An idle server
// logs one line with zeros and then stays quiet until work arrives again.
// Not thread-safe: one caller (main's stats thread).
#ifndef TPSERVE_SERVER_STATS_LOG_H_
#define TPSERVE_SERVER_STATS_LOG_H_

#include <optional>
#include <string>

#include "absl/time/time.h"
#include "server/metrics.h"

namespace tpserve {

class StatsLog {
 public:
  explicit StatsLog(absl::Time start) : last_time_(start) {}

  // The line for the interval since the previous call (the first: since `start`), or
  // nullopt when this interval and the previous one were both idle.
  std::optional<std::string> Next(const RequestTotals& totals, const ServingSnapshot& snapshot,
                                  absl::Time now);

 private:
  absl::Time last_time_;
  RequestTotals last_totals_;
  uint64_t last_queried_ = 0, last_hits_ = 0;
  bool last_idle_ = false;
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_STATS_LOG_H_
