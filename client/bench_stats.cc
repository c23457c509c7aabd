#include "client/bench_stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_format.h"

namespace tpserve {
namespace {

std::vector<double> Milliseconds(std::vector<double> seconds) {
  for (double& s : seconds) s *= 1000;
  return seconds;
}

nlohmann::json DistributionJson(const Distribution& d) {
  return {{"mean", d.mean}, {"median", d.median}, {"p99", d.p99}};
}

std::string DistributionLine(const char* name, const Distribution& d) {
  return absl::StrFormat("%-6s ms   mean %10.2f   median %10.2f   p99 %10.2f\n", name, d.mean,
                         d.median, d.p99);
}

}  // namespace

double Percentile(std::vector<double> values, double percent) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = percent / 100 * static_cast<double>(values.size() - 1);
  const size_t low = static_cast<size_t>(std::floor(rank));
  const size_t high = std::min(low + 1, values.size() - 1);
  return values[low] + (values[high] - values[low]) * (rank - static_cast<double>(low));
}

Distribution Summarize(const std::vector<double>& values) {
  if (values.empty()) return {};
  const double sum = std::accumulate(values.begin(), values.end(), 0.0);
  return {sum / static_cast<double>(values.size()), Percentile(values, 50),
          Percentile(values, 99)};
}

BenchReport MakeReport(const std::vector<RequestTiming>& timings, double duration_s,
                       int input_len) {
  BenchReport r;
  r.duration_s = duration_s;
  std::vector<double> ttft, tpot, itl, e2e;
  for (const RequestTiming& t : timings) {
    if (!t.ok) {
      ++r.failed;
      ++r.errors[t.error_code];
      continue;
    }
    ++r.completed;
    r.input_tokens += input_len;
    r.output_tokens += t.output_tokens;
    r.cached_prompt_tokens += t.cached_prompt_tokens;
    ttft.push_back(t.ttft_s);
    e2e.push_back(t.e2e_s);
    itl.insert(itl.end(), t.itl_s.begin(), t.itl_s.end());
    if (t.output_tokens > 1) tpot.push_back((t.e2e_s - t.ttft_s) / (t.output_tokens - 1));
  }
  if (duration_s > 0) {
    r.request_throughput = r.completed / duration_s;
    r.output_throughput = static_cast<double>(r.output_tokens) / duration_s;
  }
  r.ttft_ms = Summarize(Milliseconds(ttft));
  r.tpot_ms = Summarize(Milliseconds(tpot));
  r.itl_ms = Summarize(Milliseconds(itl));
  r.e2e_ms = Summarize(Milliseconds(e2e));
  return r;
}

void AddStepCounters(long long steps, long long wall_us, long long compute_us,
                     BenchReport* report) {
  report->steps = steps;
  if (steps <= 0) return;
  report->step_wall_ms = wall_us / 1e3 / steps;
  report->worker_compute_ms = compute_us / 1e3 / steps;
}

nlohmann::json ReportJson(const BenchReport& r) {
  return {{"completed", r.completed},
          {"steps", r.steps},
          {"step_wall_ms", r.step_wall_ms},
          {"worker_compute_ms", r.worker_compute_ms},
          {"frontend_overhead_ms", r.step_wall_ms - r.worker_compute_ms},
          {"failed", r.failed},
          {"errors", r.errors},
          {"duration_s", r.duration_s},
          {"input_tokens", r.input_tokens},
          {"output_tokens", r.output_tokens},
          {"cached_prompt_tokens", r.cached_prompt_tokens},
          {"request_throughput", r.request_throughput},
          {"output_throughput", r.output_throughput},
          {"ttft_ms", DistributionJson(r.ttft_ms)},
          {"tpot_ms", DistributionJson(r.tpot_ms)},
          {"itl_ms", DistributionJson(r.itl_ms)},
          {"e2e_ms", DistributionJson(r.e2e_ms)}};
}

std::string ReportText(const BenchReport& r) {
  std::string out = absl::StrFormat(
      "completed %d  failed %d  duration %.2f s\n"
      "input tokens %d (%d from the prefix cache)  output tokens %d\n"
      "request throughput %.2f req/s  output throughput %.1f tok/s\n",
      r.completed, r.failed, r.duration_s, r.input_tokens, r.cached_prompt_tokens, r.output_tokens,
      r.request_throughput, r.output_throughput);
  for (const auto& [code, count] : r.errors) {
    out += absl::StrFormat("  failures %s: %d\n", code, count);
  }
  out += DistributionLine("TTFT", r.ttft_ms) + DistributionLine("TPOT", r.tpot_ms) +
         DistributionLine("ITL", r.itl_ms) + DistributionLine("E2E", r.e2e_ms);
  if (r.steps > 0) {
    out += absl::StrFormat(
        "engine steps %d: %.3f ms per step, workers %.3f ms, frontend overhead %.3f ms\n",
        r.steps, r.step_wall_ms, r.worker_compute_ms, r.step_wall_ms - r.worker_compute_ms);
  }
  return out;
}

}  // namespace tpserve
