#include "server/metrics.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <system_error>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tpserve {
namespace {

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

void HistogramFamily(const std::string& name, const char* help, const Histogram& histogram,
                     std::string* out) {
  Family(name, "histogram", help, out);
  histogram.Render(name, out);
}

// vLLM's request_latency_buckets (its queue, prefill, decode and e2e times), and its
// inter-token latency's.
const std::vector<double>& StageBounds() {
  static const auto* bounds = new std::vector<double>{
      0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920,
      7680};
  return *bounds;
}
const std::vector<double>& InterTokenBounds() {
  static const auto* bounds = new std::vector<double>{
      0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80};
  return *bounds;
}

std::string ReadFile(const char* path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// /proc/stat's btime: when the machine booted, in seconds since the epoch.
std::optional<int64_t> BootTime() {
  for (absl::string_view line : absl::StrSplit(ReadFile("/proc/stat"), '\n')) {
    int64_t btime = 0;
    if (absl::ConsumePrefix(&line, "btime ") && absl::SimpleAtoi(line, &btime)) return btime;
  }
  return std::nullopt;
}

void RenderEngine(const ServingSnapshot& s, std::string* out) {
  Family("tpserve_serving", "gauge", "1 while a worker pool serves requests.", out);
  Sample("tpserve_serving", s.serving ? 1 : 0, out);
  Family("tpserve_requests_running", "gauge", "Requests in the running batch.", out);
  Sample("tpserve_requests_running", s.running, out);
  Family("tpserve_requests_waiting", "gauge", "Requests waiting for admission.", out);
  Sample("tpserve_requests_waiting", s.waiting, out);
  Family("tpserve_kv_blocks", "gauge", "KV cache blocks per rank.", out);
  Sample("tpserve_kv_blocks", s.kv_blocks_total, out);
  Family("tpserve_kv_blocks_in_use", "gauge", "KV blocks held by requests.", out);
  Sample("tpserve_kv_blocks_in_use", s.kv_blocks_in_use, out);
  Family("tpserve_kv_cache_usage_ratio", "gauge",
         "KV blocks in use over all KV blocks, 0 to 1 (0 without a pool).", out);
  Sample("tpserve_kv_cache_usage_ratio",
         Number(s.kv_blocks_total > 0 ? static_cast<double>(s.kv_blocks_in_use) / s.kv_blocks_total : 0), out);
  Family("tpserve_kv_blocks_cached", "gauge",
         "KV blocks whose content the prefix cache can match (held or free).", out);
  Sample("tpserve_kv_blocks_cached", s.kv_blocks_cached, out);
  Family("tpserve_engine_steps_total", "counter", "Engine steps run.", out);
  Sample("tpserve_engine_steps_total", s.steps, out);
  Family("tpserve_engine_step_seconds_total", "counter",
         "Wall time of those steps as the engine saw them.", out);
  Sample("tpserve_engine_step_seconds_total", Number(s.step_wall_us / 1e6), out);
  Family("tpserve_worker_compute_seconds_total", "counter",
         "Rank 0's own compute time in those steps.", out);
  Sample("tpserve_worker_compute_seconds_total", Number(s.worker_compute_us / 1e6), out);
  Family("tpserve_preemptions_total", "counter",
         "Sequences preempted (KV freed, recomputed later).", out);
  Sample("tpserve_preemptions_total", s.preemptions, out);
  Family("tpserve_prefix_cache_queried_tokens_total", "counter",
         "Prompt tokens looked up in the prefix cache at admission.", out);
  Sample("tpserve_prefix_cache_queried_tokens_total", s.prefix_cache_queried_tokens, out);
  Family("tpserve_prefix_cache_hit_tokens_total", "counter", "Of those, tokens found in the cache.",
         out);
  Sample("tpserve_prefix_cache_hit_tokens_total", s.prefix_cache_hit_tokens, out);
}

void RenderProcess(const ProcessSnapshot& p, std::string* out) {
  Family("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", out);
  Sample("process_resident_memory_bytes", p.resident_memory_bytes, out);
  Family("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", out);
  Sample("process_virtual_memory_bytes", p.virtual_memory_bytes, out);
  Family("process_cpu_seconds_total", "counter", "Total user and system CPU time in seconds.",
         out);
  Sample("process_cpu_seconds_total", Number(p.cpu_seconds), out);
  Family("process_open_fds", "gauge", "Number of open file descriptors.", out);
  Sample("process_open_fds", p.open_fds, out);
  Family("process_max_fds", "gauge", "Maximum number of open file descriptors.", out);
  Sample("process_max_fds", p.max_fds, out);
  Family("process_start_time_seconds", "gauge",
         "Start time of the process since the Unix epoch in seconds.", out);
  Sample("process_start_time_seconds", Number(p.start_time_seconds), out);
}

}  // namespace

const char* FinishReasonLabel(FinishReason reason) {
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

std::optional<ProcessSnapshot> ReadProcessSnapshot() {
  // Fields from the state on (proc(5)'s third): the command before it may hold spaces.
  const std::string stat = ReadFile("/proc/self/stat");
  const size_t name_end = stat.rfind(')');
  if (name_end == std::string::npos || name_end + 2 > stat.size()) return std::nullopt;
  const std::vector<absl::string_view> fields =
      absl::StrSplit(absl::string_view(stat).substr(name_end + 2), ' ', absl::SkipEmpty());
  const auto field = [&fields](size_t n, int64_t* value) {  // proc(5)'s numbering
    return n - 3 < fields.size() && absl::SimpleAtoi(fields[n - 3], value);
  };
  int64_t utime = 0, stime = 0, start_ticks = 0, vsize = 0, rss_pages = 0;
  const std::optional<int64_t> boot = BootTime();
  rlimit fd_limit{};
  if (!field(14, &utime) || !field(15, &stime) || !field(22, &start_ticks) ||
      !field(23, &vsize) || !field(24, &rss_pages) || !boot.has_value() ||
      getrlimit(RLIMIT_NOFILE, &fd_limit) != 0) {
    return std::nullopt;
  }
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  ProcessSnapshot p;
  p.resident_memory_bytes = rss_pages * sysconf(_SC_PAGESIZE);
  p.virtual_memory_bytes = vsize;
  p.cpu_seconds = (utime + stime) / ticks;
  p.max_fds = static_cast<int64_t>(fd_limit.rlim_cur);
  p.start_time_seconds = *boot + start_ticks / ticks;
  std::error_code error;
  for (std::filesystem::directory_iterator it("/proc/self/fd", error), end; !error && it != end;
       it.increment(error)) {
    ++p.open_fds;
  }
  if (error) return std::nullopt;
  return p;
}

std::vector<double> OneTwoFiveBounds(int64_t max) {
  std::vector<double> bounds;
  for (int64_t scale = 1; scale <= max; scale *= 10) {
    for (int64_t m : {1, 2, 5}) {
      if (m * scale <= max) bounds.push_back(static_cast<double>(m * scale));
    }
  }
  return bounds;
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

ServerMetrics::ServerMetrics(int max_context)
    : time_to_first_token_({0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}),
      time_per_output_token_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}),
      duration_({0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}),
      queue_time_(StageBounds()),
      prefill_time_(StageBounds()),
      decode_time_(StageBounds()),
      inter_token_latency_(InterTokenBounds()),
      prompt_length_(OneTwoFiveBounds(max_context)),
      generation_length_(OneTwoFiveBounds(max_context)) {}

RequestTotals ServerMetrics::Totals() const {
  absl::MutexLock lock(&mu_);
  RequestTotals t;
  for (const auto& [code, count] : calls_) t.calls += count;
  t.prompt_tokens = prompt_tokens_;
  t.generation_tokens = generation_tokens_;
  t.cached_prompt_tokens = cached_prompt_tokens_;
  return t;
}

void ServerMetrics::Record(const RequestRecord& r) {
  absl::MutexLock lock(&mu_);
  ++calls_[r.code];
  for (const FinishedCompletion& completion : r.finished) RecordFinished(completion);
  if (r.code != absl::StatusCode::kOk) return;
  duration_.Observe(r.duration_s);
  if (r.first_token_s.has_value()) time_to_first_token_.Observe(*r.first_token_s);
  // With several completions streaming at once, gaps between tokens are not one
  // sequence's.
  if (r.completions == 1 && r.finished.size() == 1 && r.first_token_s.has_value() &&
      r.last_token_s.has_value() && r.finished[0].completion_tokens > 1) {
    time_per_output_token_.Observe((*r.last_token_s - *r.first_token_s) /
                                   (r.finished[0].completion_tokens - 1));
  }
}

void ServerMetrics::RecordFinished(const FinishedCompletion& c) {
  ++finished_[static_cast<size_t>(c.reason)];
  prompt_tokens_ += c.prompt_tokens;
  generation_tokens_ += c.completion_tokens;
  cached_prompt_tokens_ += c.cached_prompt_tokens;
  queue_time_.Observe(c.timing.queue_s);
  prefill_time_.Observe(c.timing.prefill_s);
  decode_time_.Observe(c.timing.decode_s);
  for (double gap : c.inter_token_s) inter_token_latency_.Observe(gap);
  prompt_length_.Observe(c.prompt_tokens);
  generation_length_.Observe(c.completion_tokens);
}

std::string ServerMetrics::Render(const std::map<std::string, std::string>& info,
                                  const ServingSnapshot& snapshot) const {
  std::string out;
  Family("tpserve_info", "gauge", "The served model and how it runs (always 1).", &out);
  out += "tpserve_info{";
  bool first = true;
  for (const auto& [key, value] : info) {
    absl::StrAppend(&out, first ? "" : ",", key, "=\"", EscapeLabelValue(value), "\"");
    first = false;
  }
  out += "} 1\n";
  RenderRecorded(&out);
  RenderEngine(snapshot, &out);
  if (const std::optional<ProcessSnapshot> process = ReadProcessSnapshot()) {
    RenderProcess(*process, &out);
  }
  return out;
}

void ServerMetrics::RenderRecorded(std::string* out) const {
  absl::MutexLock lock(&mu_);
  Family("tpserve_requests_total", "counter", "Generate calls ended, by gRPC status code.", out);
  for (const auto& [code, count] : calls_) {
    absl::StrAppend(out, "tpserve_requests_total{code=\"", absl::StatusCodeToString(code), "\"} ",
                    count, "\n");
  }
  Family("tpserve_requests_finished_total", "counter",
         "Completions the engine finished, by finish reason.", out);
  for (FinishReason reason : {FinishReason::kLength, FinishReason::kStop, FinishReason::kEos,
                              FinishReason::kCancelled}) {
    absl::StrAppend(out, "tpserve_requests_finished_total{reason=\"", FinishReasonLabel(reason),
                    "\"} ", finished_[static_cast<size_t>(reason)], "\n");
  }
  Family("tpserve_prompt_tokens_total", "counter",
         "Prompt tokens of finished completions (once per completion).", out);
  Sample("tpserve_prompt_tokens_total", prompt_tokens_, out);
  Family("tpserve_prompt_tokens_cached_total", "counter",
         "Of those, tokens whose KV came from the prefix cache.", out);
  Sample("tpserve_prompt_tokens_cached_total", cached_prompt_tokens_, out);
  Family("tpserve_generation_tokens_total", "counter",
         "Tokens generated by finished completions.", out);
  Sample("tpserve_generation_tokens_total", generation_tokens_, out);
  HistogramFamily("tpserve_time_to_first_token_seconds",
                  "From a successful call's start to its first generated token.",
                  time_to_first_token_, out);
  HistogramFamily("tpserve_time_per_output_token_seconds",
                  "Mean time per generated token after the first, per successful call of one "
                  "completion.",
                  time_per_output_token_, out);
  HistogramFamily("tpserve_request_duration_seconds",
                  "From a successful call's start to its end.", duration_, out);
  HistogramFamily("tpserve_request_queue_time_seconds",
                  "Per finished completion: from its submission to its first scheduled step.",
                  queue_time_, out);
  HistogramFamily("tpserve_request_prefill_time_seconds",
                  "Per finished completion: from its first scheduled step to its first token.",
                  prefill_time_, out);
  HistogramFamily("tpserve_request_decode_time_seconds",
                  "Per finished completion: from its first token to its last.", decode_time_,
                  out);
  HistogramFamily("tpserve_inter_token_latency_seconds",
                  "Gaps between consecutive streamed tokens of finished completions.",
                  inter_token_latency_, out);
  HistogramFamily("tpserve_request_prompt_tokens", "Prompt length of finished completions.",
                  prompt_length_, out);
  HistogramFamily("tpserve_request_generation_tokens",
                  "Tokens generated by each finished completion.", generation_length_, out);
}

}  // namespace tpserve
