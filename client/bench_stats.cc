#include "client/bench_stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace tpserve {
namespace {

std::vector<double> Milliseconds(std::vector<double> seconds) {
  for (double& s : seconds) s *= 1000;
  return seconds;
}

// "p99", "p99.9", "p50".
std::string PercentName(double percent) { return absl::StrCat("p", percent); }

nlohmann::json DistributionJson(const Distribution& d) {
  nlohmann::json j = {{"mean", d.mean}, {"median", d.median}, {"std", d.std}, {"p99", d.p99}};
  for (const auto& [percent, value] : d.percentiles) j[PercentName(percent)] = value;
  return j;
}

std::string DistributionLine(const char* name, const Distribution& d) {
  std::string line = absl::StrFormat("%-6s ms   mean %10.2f   median %10.2f   std %10.2f", name,
                                     d.mean, d.median, d.std);
  for (const auto& [percent, value] : d.percentiles) {
    absl::StrAppendFormat(&line, "   %s %10.2f", PercentName(percent), value);
  }
  return line + "\n";
}

absl::StatusOr<double> PositiveNumber(absl::string_view text) {
  double value = 0;
  if (!absl::SimpleAtod(text, &value) || !(value > 0) || !std::isfinite(value)) {
    return absl::InvalidArgumentError("not a positive number");
  }
  return value;
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

Distribution Summarize(const std::vector<double>& values, const std::vector<double>& percentiles) {
  Distribution d;
  for (double percent : percentiles) d.percentiles.emplace_back(percent, 0.0);
  if (values.empty()) return d;
  const double n = static_cast<double>(values.size());
  d.mean = std::accumulate(values.begin(), values.end(), 0.0) / n;
  double squares = 0;
  for (double v : values) squares += (v - d.mean) * (v - d.mean);
  d.std = std::sqrt(squares / n);
  d.median = Percentile(values, 50);
  d.p99 = Percentile(values, 99);
  for (auto& [percent, value] : d.percentiles) value = Percentile(values, percent);
  return d;
}

absl::StatusOr<std::vector<double>> ParsePercentiles(const std::string& text) {
  std::vector<double> percentiles;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    double percent = 0;
    if (!absl::SimpleAtod(part, &percent) || !(percent > 0 && percent <= 100)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--percentiles: \"", part, "\" is not a percentile in (0, 100]; e.g. 50,90,99"));
    }
    percentiles.push_back(percent);
  }
  return percentiles;
}

absl::Status ParseGoodput(const std::vector<std::string>& specs, ReportOptions* options) {
  for (const std::string& spec : specs) {
    for (absl::string_view part : absl::StrSplit(spec, ',')) {
      const std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(part, ':');
      double* slo = kv.first == "ttft"   ? &options->slo_ttft_ms
                    : kv.first == "tpot" ? &options->slo_tpot_ms
                    : kv.first == "e2el" ? &options->slo_e2el_ms
                                         : nullptr;
      const absl::StatusOr<double> ms = PositiveNumber(kv.second);
      if (slo == nullptr || !ms.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--goodput: \"", part, "\" is not ttft:MS, tpot:MS or e2el:MS with MS > 0"));
      }
      *slo = *ms;
    }
  }
  return absl::OkStatus();
}

BenchReport MakeReport(const std::vector<RequestTiming>& timings, double duration_s,
                       const ReportOptions& options) {
  BenchReport r;
  r.duration_s = duration_s;
  r.has_goodput = options.has_slo();
  std::vector<double> ttft, tpot, itl, e2e;
  for (const RequestTiming& t : timings) {
    if (!t.ok) {
      ++r.failed;
      ++r.errors[t.error_code];
      continue;
    }
    ++r.completed;
    r.input_tokens += t.prompt_tokens;
    r.input_lens.push_back(t.prompt_tokens);
    r.output_lens.push_back(t.output_tokens);
    r.output_tokens += t.output_tokens;
    r.cached_prompt_tokens += t.cached_prompt_tokens;
    ttft.push_back(t.ttft_s);
    e2e.push_back(t.e2e_s);
    itl.insert(itl.end(), t.itl_s.begin(), t.itl_s.end());
    const double tpot_s = t.output_tokens > 1 ? (t.e2e_s - t.ttft_s) / (t.output_tokens - 1) : 0;
    if (t.output_tokens > 1) tpot.push_back(tpot_s);
    // As vllm bench serve: every SLO given must hold (a request of one token has no TPOT).
    const bool good = (options.slo_ttft_ms <= 0 || t.ttft_s * 1e3 <= options.slo_ttft_ms) &&
                      (options.slo_tpot_ms <= 0 || tpot_s * 1e3 <= options.slo_tpot_ms) &&
                      (options.slo_e2el_ms <= 0 || t.e2e_s * 1e3 <= options.slo_e2el_ms);
    if (r.has_goodput && good) ++r.good_requests;
  }
  if (duration_s > 0) {
    r.request_throughput = r.completed / duration_s;
    r.output_throughput = static_cast<double>(r.output_tokens) / duration_s;
    r.total_token_throughput =
        static_cast<double>(r.input_tokens + r.output_tokens) / duration_s;
    r.request_goodput = r.good_requests / duration_s;
  }
  r.ttft_ms = Summarize(Milliseconds(ttft), options.percentiles);
  r.tpot_ms = Summarize(Milliseconds(tpot), options.percentiles);
  r.itl_ms = Summarize(Milliseconds(itl), options.percentiles);
  r.e2e_ms = Summarize(Milliseconds(e2e), options.percentiles);
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
  nlohmann::json j = {{"completed", r.completed},
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
          {"total_token_throughput", r.total_token_throughput},
          {"ttft_ms", DistributionJson(r.ttft_ms)},
          {"tpot_ms", DistributionJson(r.tpot_ms)},
          {"itl_ms", DistributionJson(r.itl_ms)},
          {"e2e_ms", DistributionJson(r.e2e_ms)},
          {"input_lens", r.input_lens},
          {"output_lens", r.output_lens}};
  if (r.has_goodput) {
    j["good_requests"] = r.good_requests;
    j["request_goodput"] = r.request_goodput;
  }
  return j;
}

std::string ReportText(const BenchReport& r) {
  std::string out = absl::StrFormat(
      "completed %d  failed %d  duration %.2f s\n"
      "input tokens %d (%d from the prefix cache)  output tokens %d\n"
      "request throughput %.2f req/s  output throughput %.1f tok/s  total token throughput "
      "%.1f tok/s\n",
      r.completed, r.failed, r.duration_s, r.input_tokens, r.cached_prompt_tokens, r.output_tokens,
      r.request_throughput, r.output_throughput, r.total_token_throughput);
  if (r.has_goodput) {
    out += absl::StrFormat("goodput %.2f req/s (%d of %d requests met every SLO)\n",
                           r.request_goodput, r.good_requests, r.completed);
  }
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
