#include "server/metrics.h"

#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

bool Has(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos;
}

TEST(HistogramTest, BucketsAreCumulativeWithInfSumAndCount) {
  Histogram h({0.1, 1});
  for (double v : {0.05, 0.1, 0.5, 7.0}) h.Observe(v);
  std::string out = "\n";
  h.Render("x", &out);
  EXPECT_EQ(out,
            "\nx_bucket{le=\"0.1\"} 2\nx_bucket{le=\"1\"} 3\n"
            "x_bucket{le=\"+Inf\"} 4\nx_sum 7.65\nx_count 4\n");
}

TEST(ServerMetricsTest, RecordsCallsFinishesTokensAndLatencies) {
  ServerMetrics m;
  RequestRecord ok;
  ok.finish_reasons = {FinishReason::kLength};
  ok.prompt_tokens = 10;
  ok.completion_tokens = 5;
  ok.cached_prompt_tokens = 8;
  ok.first_token_s = 0.2;
  ok.last_token_s = 0.6;  // 4 gaps of 0.1 s
  ok.duration_s = 0.7;
  m.Record(ok);
  RequestRecord bad;
  bad.code = absl::StatusCode::kInvalidArgument;
  bad.duration_s = 0.001;
  m.Record(bad);
  RequestRecord cancelled;  // a drain's grace ran out: finished, OK, one token
  cancelled.finish_reasons = {FinishReason::kCancelled};
  cancelled.prompt_tokens = 3;
  cancelled.completion_tokens = 1;
  cancelled.first_token_s = 0.1;
  cancelled.last_token_s = 0.1;
  cancelled.duration_s = 0.2;
  m.Record(cancelled);

  ServingSnapshot s;
  s.serving = true;
  s.running = 2;
  s.kv_blocks_total = 64;
  s.kv_blocks_in_use = 5;
  s.kv_blocks_cached = 7;
  s.steps = 9;
  s.step_wall_us = 1500000;
  s.prefix_cache_queried_tokens = 13;
  s.prefix_cache_hit_tokens = 8;
  const std::string text = "\n" + m.Render({{"model", "m\"1"}, {"tp", "2"}}, s);
  EXPECT_TRUE(Has(text, "tpserve_info{model=\"m\\\"1\",tp=\"2\"} 1")) << text;
  EXPECT_TRUE(Has(text, "tpserve_requests_total{code=\"OK\"} 2")) << text;
  EXPECT_TRUE(Has(text, "tpserve_requests_total{code=\"INVALID_ARGUMENT\"} 1")) << text;
  EXPECT_TRUE(Has(text, "tpserve_requests_finished_total{reason=\"length\"} 1"));
  EXPECT_TRUE(Has(text, "tpserve_requests_finished_total{reason=\"cancelled\"} 1"));
  EXPECT_TRUE(Has(text, "tpserve_requests_finished_total{reason=\"eos\"} 0"));
  EXPECT_TRUE(Has(text, "tpserve_prompt_tokens_total 13"));
  EXPECT_TRUE(Has(text, "tpserve_prompt_tokens_cached_total 8"));
  EXPECT_TRUE(Has(text, "tpserve_generation_tokens_total 6"));
  // Only successful calls are timed; TPOT needs two tokens.
  EXPECT_TRUE(Has(text, "tpserve_request_duration_seconds_count 2"));
  EXPECT_TRUE(Has(text, "tpserve_time_to_first_token_seconds_count 2"));
  EXPECT_TRUE(Has(text, "tpserve_time_to_first_token_seconds_bucket{le=\"0.25\"} 2"));
  EXPECT_TRUE(
      Has(text, "tpserve_time_to_first_token_seconds_bucket{le=\"0.1\"} 1"));
  EXPECT_TRUE(Has(text, "tpserve_time_per_output_token_seconds_count 1"));
  EXPECT_TRUE(
      Has(text, "tpserve_time_per_output_token_seconds_bucket{le=\"0.1\"} 1"));
  EXPECT_TRUE(
      Has(text, "tpserve_time_per_output_token_seconds_bucket{le=\"0.05\"} 0"));
  EXPECT_TRUE(Has(text, "tpserve_serving 1"));
  EXPECT_TRUE(Has(text, "tpserve_requests_running 2"));
  EXPECT_TRUE(Has(text, "tpserve_kv_blocks 64"));
  EXPECT_TRUE(Has(text, "tpserve_kv_blocks_in_use 5"));
  EXPECT_TRUE(Has(text, "tpserve_kv_blocks_cached 7"));
  EXPECT_TRUE(Has(text, "tpserve_engine_steps_total 9"));
  EXPECT_TRUE(Has(text, "tpserve_engine_step_seconds_total 1.5"));
  EXPECT_TRUE(Has(text, "tpserve_prefix_cache_hit_tokens_total 8"));
  EXPECT_TRUE(Has(text, "tpserve_prefix_cache_queried_tokens_total 13"));
}

// Every sample line parses as the text format and belongs to a family whose HELP and
// TYPE came first, once each.
TEST(ServerMetricsTest, OutputIsWellFormedExposition) {
  ServerMetrics m;
  RequestRecord r;
  r.finish_reasons = {FinishReason::kStop};
  r.completion_tokens = 3;
  r.first_token_s = 0.01;
  r.last_token_s = 0.03;
  m.Record(r);
  std::istringstream in(m.Render({{"model", "a\\b\nc"}}, ServingSnapshot()));
  const std::regex help(R"(# HELP ([a-z_]+) \S.*)");
  const std::regex type(R"(# TYPE ([a-z_]+) (counter|gauge|histogram))");
  const std::regex sample(
      R"(([a-z_]+)(\{[a-z_]+="([^"\\\n]|\\.)*"(,[a-z_]+="([^"\\\n]|\\.)*")*\})? (\d+(\.\d+)?(e[-+]?\d+)?|\+Inf|NaN))");
  std::set<std::string> helped, typed;
  std::map<std::string, std::string> types;
  std::string line;
  int samples = 0;
  while (std::getline(in, line)) {
    std::smatch match;
    if (std::regex_match(line, match, help)) {
      EXPECT_TRUE(helped.insert(match[1]).second) << line;
    } else if (std::regex_match(line, match, type)) {
      EXPECT_TRUE(typed.insert(match[1]).second) << line;
      types[match[1]] = match[2];
    } else {
      ASSERT_TRUE(std::regex_match(line, match, sample)) << line;
      std::string family = match[1];
      for (const char* suffix : {"_bucket", "_sum", "_count"}) {
        const std::string s = suffix;
        if (types.count(family) == 0 && family.size() > s.size() &&
            family.compare(family.size() - s.size(), s.size(), s) == 0) {
          family.resize(family.size() - s.size());
        }
      }
      EXPECT_TRUE(helped.count(family) == 1 && typed.count(family) == 1) << line;
      ++samples;
    }
  }
  EXPECT_GT(samples, 40);
  EXPECT_EQ(EscapeLabelValue("a\\b\nc\"d"), "a\\\\b\\nc\\\"d");
}

}  // namespace
}  // namespace tpserve
