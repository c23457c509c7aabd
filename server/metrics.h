// ServerMetrics: what tpserve exposes to Prometheus (`--metrics-port`, GET /metrics, text
// exposition format 0.0.4). Two kinds of figures:
//  - per request, recorded by the service when a Generate call ends (Record): calls by
//    status code, finished completions by reason, their prompt, generated and cached
//    prompt tokens (a prompt counts once per completion), and histograms of time to
//    first token, time per output token after the first (calls of one completion), and
//    the call's duration;
//  - the engine's state and counters at scrape time (ServingSnapshot, over every worker
//    pool the server has had): running and waiting requests, KV blocks in use and
//    cached, steps and their time, preemptions, prefix-cache lookups and hits.
// Metric names are prefixed tpserve_; README.md lists them.
//
// Thread-safe: Record from every gRPC handler thread, Render from the scrape thread.
#ifndef TPSERVE_SERVER_METRICS_H_
#define TPSERVE_SERVER_METRICS_H_

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "server/request.h"

namespace tpserve {

// One Generate call as the service saw it.
struct RequestRecord {
  absl::StatusCode code = absl::StatusCode::kOk;  // what the call returned
  int completions = 1;                            // SamplingParams.n
  std::vector<FinishReason> finish_reasons;       // of the completions the engine finished
  int prompt_tokens = 0;                          // their usages, summed
  int completion_tokens = 0;
  int cached_prompt_tokens = 0;
  std::optional<double> first_token_s;  // since the call started: its first token
  std::optional<double> last_token_s;   // and its last
  double duration_s = 0;                // the whole call
};

// The engine side at scrape time; counters are totals since the server started.
struct ServingSnapshot {
  bool serving = false;  // an engine is taking requests
  int running = 0;
  int waiting = 0;
  int kv_blocks_total = 0;
  int kv_blocks_in_use = 0;
  int kv_blocks_cached = 0;
  uint64_t steps = 0;
  int64_t step_wall_us = 0;
  int64_t worker_compute_us = 0;
  uint64_t preemptions = 0;
  uint64_t prefix_cache_queried_tokens = 0;
  uint64_t prefix_cache_hit_tokens = 0;
};

// Cumulative buckets of observations, as a Prometheus histogram.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);  // ascending; +Inf is implied
  void Observe(double value);
  // `name`_bucket{le=...}, `name`_sum and `name`_count lines.
  void Render(const std::string& name, std::string* out) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; the last is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

class ServerMetrics {
 public:
  ServerMetrics();

  void Record(const RequestRecord& record);
  // The exposition text: the model's info line, the recorded request figures, then
  // `snapshot`.
  std::string Render(const std::map<std::string, std::string>& info,
                     const ServingSnapshot& snapshot) const;

 private:
  mutable absl::Mutex mu_;
  std::map<absl::StatusCode, uint64_t> calls_ ABSL_GUARDED_BY(mu_);
  std::array<uint64_t, 4> finished_ ABSL_GUARDED_BY(mu_) = {};  // by FinishReason
  uint64_t prompt_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t generation_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t cached_prompt_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  Histogram time_to_first_token_ ABSL_GUARDED_BY(mu_);
  Histogram time_per_output_token_ ABSL_GUARDED_BY(mu_);
  Histogram duration_ ABSL_GUARDED_BY(mu_);
};

// `value` as a label value: backslash, double quote and newline escaped.
std::string EscapeLabelValue(const std::string& value);

}  // namespace tpserve

#endif  // TPSERVE_SERVER_METRICS_H_
