// Statistics of a serving benchmark, in the style of vLLM's benchmark_serving: time to
// first token (TTFT), time per output token after the first (TPOT), inter-token latency
// between streamed chunks (ITL), end-to-end latency (E2E), request and output-token
// throughput, and the failures by status code. Pure functions; safe from any thread.
#ifndef TPSERVE_CLIENT_BENCH_STATS_H_
#define TPSERVE_CLIENT_BENCH_STATS_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace tpserve {

// One request as the client saw it; times in seconds from sending it.
struct RequestTiming {
  bool ok = false;
  std::string error_code;  // status code name when !ok
  double ttft_s = 0;       // first chunk that carried tokens
  double e2e_s = 0;        // the call's end
  std::vector<double> itl_s;  // gaps between chunks that carried tokens
  int output_tokens = 0;
  int cached_prompt_tokens = 0;  // the server's usage: prompt tokens from its prefix cache
  int prompt_tokens = 0;         // the prompt sent
};

struct Distribution {
  double mean = 0;
  double median = 0;
  double std = 0;  // population standard deviation, as numpy.std
  double p99 = 0;
  // (percent, value) for each percentile asked for (--percentiles), in that order.
  std::vector<std::pair<double, double>> percentiles;
};

// What a report summarises beside the defaults, as vllm bench serve's options do.
struct ReportOptions {
  std::vector<double> percentiles = {99};  // in (0, 100]
  // Service-level objectives for goodput, ms (0: none): a request counts toward goodput
  // when it meets every one given (TTFT, TPOT, end-to-end latency).
  double slo_ttft_ms = 0, slo_tpot_ms = 0, slo_e2el_ms = 0;
  bool has_slo() const { return slo_ttft_ms > 0 || slo_tpot_ms > 0 || slo_e2el_ms > 0; }
};

// "50,90,99.9" -> percentiles; InvalidArgument naming --percentiles otherwise.
absl::StatusOr<std::vector<double>> ParsePercentiles(const std::string& text);
// Each of `specs` "ttft:MS", "tpot:MS" or "e2el:MS" (several may share one value,
// separated by commas); InvalidArgument naming --goodput otherwise.
absl::Status ParseGoodput(const std::vector<std::string>& specs, ReportOptions* options);

struct BenchReport {
  int completed = 0;
  int failed = 0;
  double duration_s = 0;
  long long input_tokens = 0;
  long long output_tokens = 0;
  long long cached_prompt_tokens = 0;  // of input_tokens, taken from the prefix cache
  double request_throughput = 0;  // completed requests / s
  double output_throughput = 0;   // output tokens / s
  double total_token_throughput = 0;  // (input + output tokens) / s
  // With SLOs: the completed requests that met them, and those per second.
  bool has_goodput = false;
  int good_requests = 0;
  double request_goodput = 0;
  Distribution ttft_ms, tpot_ms, itl_ms, e2e_ms;
  std::map<std::string, int> errors;  // failures by status code name
  // Each completed request's prompt and output tokens, in the run's order (vLLM's
  // input_lens and output_lens).
  std::vector<int> input_lens, output_lens;
  // Engine steps during the run, and the mean per step of the engine's step wall time
  // and of the workers' compute time (from GetModelInfo before and after).
  long long steps = 0;
  double step_wall_ms = 0;
  double worker_compute_ms = 0;
};

// Fills the step fields from two GetModelInfo counter readings.
void AddStepCounters(long long steps, long long wall_us, long long compute_us,
                     BenchReport* report);

// Linear interpolation between closest ranks, as numpy.percentile; 0 for no values.
double Percentile(std::vector<double> values, double percent);
Distribution Summarize(const std::vector<double>& values,
                       const std::vector<double>& percentiles = {99});

BenchReport MakeReport(const std::vector<RequestTiming>& timings, double duration_s,
                       const ReportOptions& options = {});

nlohmann::json ReportJson(const BenchReport& report);
std::string ReportText(const BenchReport& report);

}  // namespace tpserve

#endif  // TPSERVE_CLIENT_BENCH_STATS_H_
