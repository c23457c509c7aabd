#include "server/metrics.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tpserve {
namespace {

const char* ReasonLabel(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kEos:
      return "eos";
    case FinishReason::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

// Shortest text that reads back as the same double; "+Inf" and "NaN" as Prometheus has.
std::string Number(double v) {
  if (v != v) return "NaN";
  if (v == std::numeric_limits<double>::infinity()) return "+Inf";
  if (v == -std::numeric_limits<double>::infinity()) return "-Inf";
  // The shortest text that reads back as v: bucket bounds print as le="0.005", which is
  // what dashboards match, not as %.17g's 0.0050000000000000001.
  char text[64];
  const std::to_chars_result r = std::to_chars(text, text + sizeof(text), v);
  return std::string(text, r.ptr);
}

void Family(const std::string& name, const char* type, const char* help, std::string* out) {
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
}

template <typename T>
void Sample(const std::string& name, T value, std::string* out) {
  absl::StrAppend(out, name, " ", value, "\n");
}

}  // namespace

std::string EscapeLabelValue(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double value) {
  const size_t bucket = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  ++counts_[bucket];
  sum_ += value;
  ++count_;
}

void Histogram::Render(const std::string& name, std::string* out) const {
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    const std::string le = i < bounds_.size() ? Number(bounds_[i]) : "+Inf";
    absl::StrAppend(out, name, "_bucket{le=\"", le, "\"} ", cumulative, "\n");
  }
  absl::StrAppend(out, name, "_sum ", Number(sum_), "\n", name, "_count ", count_, "\n");
}

ServerMetrics::ServerMetrics()
    : time_to_first_token_({0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}),
      time_per_output_token_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}),
      duration_({0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}) {}

void ServerMetrics::Record(const RequestRecord& r) {
  absl::MutexLock lock(&mu_);
  ++calls_[r.code];
  for (FinishReason reason : r.finish_reasons) ++finished_[static_cast<size_t>(reason)];
  prompt_tokens_ += r.prompt_tokens;
  generation_tokens_ += r.completion_tokens;
  cached_prompt_tokens_ += r.cached_prompt_tokens;
  if (r.code != absl::StatusCode::kOk) return;
  duration_.Observe(r.duration_s);
  if (r.first_token_s.has_value()) time_to_first_token_.Observe(*r.first_token_s);
  // With several completions streaming at once, gaps between tokens are not one
  // sequence's.
  if (r.completions == 1 && r.first_token_s.has_value() && r.last_token_s.has_value() &&
      r.completion_tokens > 1) {
    time_per_output_token_.Observe((*r.last_token_s - *r.first_token_s) /
                                   (r.completion_tokens - 1));
  }
}

std::string ServerMetrics::Render(const std::map<std::string, std::string>& info,
                                  const ServingSnapshot& s) const {
  std::string out;
  Family("tpserve_info", "gauge", "The served model and how it runs (always 1).", &out);
  out += "tpserve_info{";
  bool first = true;
  for (const auto& [key, value] : info) {
    absl::StrAppend(&out, first ? "" : ",", key, "=\"", EscapeLabelValue(value), "\"");
    first = false;
  }
  out += "} 1\n";
  {
    absl::MutexLock lock(&mu_);
    Family("tpserve_requests_total", "counter", "Generate calls ended, by gRPC status code.", &out);
    for (const auto& [code, count] : calls_) {
      absl::StrAppend(&out, "tpserve_requests_total{code=\"", absl::StatusCodeToString(code),
                      "\"} ", count, "\n");
    }
    Family("tpserve_requests_finished_total", "counter",
           "Completions the engine finished, by finish reason.", &out);
    for (FinishReason reason : {FinishReason::kLength, FinishReason::kStop, FinishReason::kEos,
                                FinishReason::kCancelled}) {
      absl::StrAppend(&out, "tpserve_requests_finished_total{reason=\"", ReasonLabel(reason),
                      "\"} ", finished_[static_cast<size_t>(reason)], "\n");
    }
    Family("tpserve_prompt_tokens_total", "counter",
           "Prompt tokens of finished completions (once per completion).", &out);
    Sample("tpserve_prompt_tokens_total", prompt_tokens_, &out);
    Family("tpserve_prompt_tokens_cached_total", "counter",
           "Of those, tokens whose KV came from the prefix cache.", &out);
    Sample("tpserve_prompt_tokens_cached_total", cached_prompt_tokens_, &out);
    Family("tpserve_generation_tokens_total", "counter",
           "Tokens generated by finished completions.", &out);
    Sample("tpserve_generation_tokens_total", generation_tokens_, &out);
    Family("tpserve_time_to_first_token_seconds", "histogram",
           "From a successful call's start to its first generated token.", &out);
    time_to_first_token_.Render("tpserve_time_to_first_token_seconds", &out);
    Family("tpserve_time_per_output_token_seconds", "histogram",
           "Mean time per generated token after the first, per successful call of one "
           "completion.",
           &out);
    time_per_output_token_.Render("tpserve_time_per_output_token_seconds", &out);
    Family("tpserve_request_duration_seconds", "histogram",
           "From a successful call's start to its end.", &out);
    duration_.Render("tpserve_request_duration_seconds", &out);
  }
  Family("tpserve_serving", "gauge", "1 while a worker pool serves requests.", &out);
  Sample("tpserve_serving", s.serving ? 1 : 0, &out);
  Family("tpserve_requests_running", "gauge", "Requests in the running batch.", &out);
  Sample("tpserve_requests_running", s.running, &out);
  Family("tpserve_requests_waiting", "gauge", "Requests waiting for admission.", &out);
  Sample("tpserve_requests_waiting", s.waiting, &out);
  Family("tpserve_kv_blocks", "gauge", "KV cache blocks per rank.", &out);
  Sample("tpserve_kv_blocks", s.kv_blocks_total, &out);
  Family("tpserve_kv_blocks_in_use", "gauge", "KV blocks held by requests.", &out);
  Sample("tpserve_kv_blocks_in_use", s.kv_blocks_in_use, &out);
  Family("tpserve_kv_blocks_cached", "gauge",
         "KV blocks whose content the prefix cache can match (held or free).", &out);
  Sample("tpserve_kv_blocks_cached", s.kv_blocks_cached, &out);
  Family("tpserve_engine_steps_total", "counter", "Engine steps run.", &out);
  Sample("tpserve_engine_steps_total", s.steps, &out);
  Family("tpserve_engine_step_seconds_total", "counter",
         "Wall time of those steps as the engine saw them.", &out);
  Sample("tpserve_engine_step_seconds_total", Number(s.step_wall_us / 1e6), &out);
  Family("tpserve_worker_compute_seconds_total", "counter",
         "Rank 0's own compute time in those steps.", &out);
  Sample("tpserve_worker_compute_seconds_total", Number(s.worker_compute_us / 1e6), &out);
  Family("tpserve_preemptions_total", "counter",
         "Sequences preempted (KV freed, recomputed later).", &out);
  Sample("tpserve_preemptions_total", s.preemptions, &out);
  Family("tpserve_prefix_cache_queried_tokens_total", "counter",
         "Prompt tokens looked up in the prefix cache at admission.", &out);
  Sample("tpserve_prefix_cache_queried_tokens_total", s.prefix_cache_queried_tokens, &out);
  Family("tpserve_prefix_cache_hit_tokens_total", "counter", "Of those, tokens found in the cache.",
         &out);
  Sample("tpserve_prefix_cache_hit_tokens_total", s.prefix_cache_hit_tokens, &out);
  return out;
}

}  // namespace tpserve
