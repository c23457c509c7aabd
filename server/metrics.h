// ServerMetrics: what tpserve exposes to Prometheus (`--metrics-port`, GET /metrics, text
// exposition format 0.0.4). Three kinds of figures:
//  - per call, recorded by the service when a Generate call ends (Record): calls by
//    status code, and histograms of time to first token, time per output token after
//    the first (calls of one completion), and the call's duration (successful calls);
//    per completion the engine finished, whatever the call's status: its finish reason,
//    its prompt, generated and cached prompt tokens (a prompt counts once per
//    completion), and histograms of its queue, prefill and decode times (the engine's
//    StageTimes), the gaps between its streamed tokens, and its prompt and
//    generation lengths — so each of those histograms but the gaps' counts exactly the
//    finished completions, and the length histograms' sums equal the token counters;
//  - the engine's state and counters at scrape time (ServingSnapshot, over every worker
//    pool the server has had): running and waiting requests, KV blocks in use and
//    cached and their share of the pool, steps and their time, preemptions,
//    prefix-cache lookups and hits;
//  - the process's own (ProcessSnapshot, read from /proc/self at scrape time), under
//    Prometheus's standard process_* names.
// Bucket bounds follow vLLM's for the same figures. Metric names are prefixed tpserve_
// (but process_*); README.md lists them beside vLLM's.
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

// "length", "stop", "eos" or "cancelled": the label of tpserve_requests_finished_total.
const char* FinishReasonLabel(FinishReason reason);

// One completion the engine finished: its last chunk, and the gaps the call saw.
struct FinishedCompletion {
  FinishReason reason = FinishReason::kLength;
  int prompt_tokens = 0;  // its usage
  int completion_tokens = 0;
  int cached_prompt_tokens = 0;
  StageTimes timing;
  // Seconds between its consecutive chunks with tokens, as they reached the call (a
  // chunk carries one token here: completion_tokens - 1 gaps).
  std::vector<double> inter_token_s;
};

// One Generate call as the service saw it.
struct RequestRecord {
  absl::StatusCode code = absl::StatusCode::kOk;  // what the call returned
  int completions = 1;                            // SamplingParams.n
  std::vector<FinishedCompletion> finished;       // in the order they finished
  std::optional<double> first_token_s;  // since the call started: its first token
  std::optional<double> last_token_s;   // and its last
  double duration_s = 0;                // the whole call
};

// The recorded calls' counters so far.
struct RequestTotals {
  uint64_t calls = 0;  // every status
  uint64_t prompt_tokens = 0;
  uint64_t generation_tokens = 0;
  uint64_t cached_prompt_tokens = 0;
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

// The process at scrape time: Prometheus's standard process metrics.
struct ProcessSnapshot {
  int64_t resident_memory_bytes = 0;
  int64_t virtual_memory_bytes = 0;
  double cpu_seconds = 0;  // user + system
  int64_t open_fds = 0;
  int64_t max_fds = 0;            // the soft RLIMIT_NOFILE
  double start_time_seconds = 0;  // since the Unix epoch
};

// From /proc/self (and /proc/stat's boot time); nullopt where they cannot be read.
std::optional<ProcessSnapshot> ReadProcessSnapshot();

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

// 1, 2, 5, 10, 20, 50, ... up to `max` (vLLM's build_1_2_5_buckets): token counts.
std::vector<double> OneTwoFiveBounds(int64_t max);

class ServerMetrics {
 public:
  // `max_context`: the served context, the top of the token-count histograms' bounds.
  explicit ServerMetrics(int max_context);

  void Record(const RequestRecord& record);
  RequestTotals Totals() const;
  // The exposition text: the model's info line, the recorded request figures,
  // `snapshot`, then the process's figures (ReadProcessSnapshot, when it can be read).
  std::string Render(const std::map<std::string, std::string>& info,
                     const ServingSnapshot& snapshot) const;

 private:
  void RecordFinished(const FinishedCompletion& completion) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RenderRecorded(std::string* out) const;

  mutable absl::Mutex mu_;
  std::map<absl::StatusCode, uint64_t> calls_ ABSL_GUARDED_BY(mu_);
  std::array<uint64_t, 4> finished_ ABSL_GUARDED_BY(mu_) = {};  // by FinishReason
  uint64_t prompt_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t generation_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t cached_prompt_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  Histogram time_to_first_token_ ABSL_GUARDED_BY(mu_);
  Histogram time_per_output_token_ ABSL_GUARDED_BY(mu_);
  Histogram duration_ ABSL_GUARDED_BY(mu_);
  Histogram queue_time_ ABSL_GUARDED_BY(mu_);
  Histogram prefill_time_ ABSL_GUARDED_BY(mu_);
  Histogram decode_time_ ABSL_GUARDED_BY(mu_);
  Histogram inter_token_latency_ ABSL_GUARDED_BY(mu_);
  Histogram prompt_length_ ABSL_GUARDED_BY(mu_);
  Histogram generation_length_ ABSL_GUARDED_BY(mu_);
};

// `value` as a label value: backslash, double quote and newline escaped.
std::string EscapeLabelValue(const std::string& value);

}  // namespace tpserve

#endif  // TPSERVE_SERVER_METRICS_H_
