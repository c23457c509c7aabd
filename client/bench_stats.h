// Statistics of a serving benchmark, in the style of vLLM's benchmark_serving: time to
// first token (TTFT), time per output token after the first (TPOT), inter-token latency
// between streamed chunks (ITL), end-to-end latency (E2E), request and output-token
// throughput, and the failures by status code. Pure functions; safe from any thread.
#ifndef TPSERVE_CLIENT_BENCH_STATS_H_
#define TPSERVE_CLIENT_BENCH_STATS_H_

#include <map>
#include <string>
#include <vector>

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
};

struct Distribution {
  double mean = 0;
  double median = 0;
  double p99 = 0;
};

struct BenchReport {
  int completed = 0;
  int failed = 0;
  double duration_s = 0;
  long long input_tokens = 0;
  long long output_tokens = 0;
  long long cached_prompt_tokens = 0;  // of input_tokens, taken from the prefix cache
  double request_throughput = 0;  // completed requests / s
  double output_throughput = 0;   // output tokens / s
  Distribution ttft_ms, tpot_ms, itl_ms, e2e_ms;
  std::map<std::string, int> errors;  // failures by status code name
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
Distribution Summarize(const std::vector<double>& values);

BenchReport MakeReport(const std::vector<RequestTiming>& timings, double duration_s,
                       int input_len);

nlohmann::json ReportJson(const BenchReport& report);
std::string ReportText(const BenchReport& report);

}  // namespace tpserve

#endif  // TPSERVE_CLIENT_BENCH_STATS_H_
