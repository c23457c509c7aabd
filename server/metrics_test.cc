#include "server/metrics.h"

#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
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
  ServerMetrics m(4096);
  RequestRecord ok;
  ok.finished = {{FinishReason::kLength, 10, 5, 8, {}, {}}};
  ok.first_token_s = 0.2;
  ok.last_token_s = 0.6;  // 4 gaps of 0.1 s
  ok.duration_s = 0.7;
  m.Record(ok);
  RequestRecord bad;
  bad.code = absl::StatusCode::kInvalidArgument;
  bad.duration_s = 0.001;
  m.Record(bad);
  RequestRecord cancelled;  // a drain's grace ran out: finished, OK, one token
  cancelled.finished = {{FinishReason::kCancelled, 3, 1, 0, {}, {}}};
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
  ServerMetrics m(4096);
  RequestRecord r;
  r.finished = {{FinishReason::kStop, 2, 3, 0, {0.001, 0.2, 0.5}, {0.01, 0.01}}};
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
  for (const char* family :
       {"tpserve_kv_cache_usage_ratio", "tpserve_request_queue_time_seconds",
        "tpserve_request_prefill_time_seconds", "tpserve_request_decode_time_seconds",
        "tpserve_inter_token_latency_seconds", "tpserve_request_prompt_tokens",
        "tpserve_request_generation_tokens", "process_resident_memory_bytes",
        "process_virtual_memory_bytes", "process_cpu_seconds_total", "process_open_fds",
        "process_max_fds", "process_start_time_seconds"}) {
    EXPECT_TRUE(helped.count(family) == 1 && typed.count(family) == 1) << family;
  }
  EXPECT_EQ(types["tpserve_kv_cache_usage_ratio"], "gauge");
  EXPECT_EQ(types["tpserve_inter_token_latency_seconds"], "histogram");
  EXPECT_EQ(types["tpserve_request_prompt_tokens"], "histogram");
  EXPECT_EQ(types["process_cpu_seconds_total"], "counter");
  EXPECT_EQ(types["process_open_fds"], "gauge");
  EXPECT_EQ(EscapeLabelValue("a\\b\nc\"d"), "a\\\\b\\nc\\\"d");
}

// The `le` bounds of histogram `name` in `text`, in order, +Inf last.
std::vector<std::string> Bounds(const std::string& text, const std::string& name) {
  std::vector<std::string> bounds;
  const std::regex bucket(name + R"re(_bucket\{le="([^"]+)"\} \d+)re");
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::smatch match;
    if (std::regex_match(line, match, bucket)) bounds.push_back(match[1]);
  }
  return bounds;
}

// Each finished completion: its stages, its gaps and its lengths, whatever the call's
// status; the length histograms' sums are the token counters.
TEST(ServerMetricsTest, FinishedCompletionsFillTheStageGapAndLengthHistograms) {
  ServerMetrics m(100);
  RequestRecord two;  // n = 2: both finished
  two.completions = 2;
  two.finished = {{FinishReason::kLength, 7, 3, 0, {0.25, 0.4, 2.0}, {0.02, 0.3}},
                  {FinishReason::kEos, 7, 1, 4, {0.25, 0.6, 0}, {}}};
  two.first_token_s = 0.7;
  two.last_token_s = 3.0;
  m.Record(two);
  RequestRecord expired;  // one completion finished before the deadline ended the call
  expired.code = absl::StatusCode::kDeadlineExceeded;
  expired.completions = 2;
  expired.finished = {{FinishReason::kLength, 60, 40, 0, {1.0, 0.5, 9.0}, {0.05}}};
  m.Record(expired);

  const std::string text = "\n" + m.Render({}, ServingSnapshot());
  EXPECT_TRUE(Has(text, "tpserve_request_queue_time_seconds_count 3")) << text;
  EXPECT_TRUE(Has(text, "tpserve_request_queue_time_seconds_sum 1.5"));
  EXPECT_TRUE(Has(text, "tpserve_request_queue_time_seconds_bucket{le=\"0.3\"} 2"));
  EXPECT_TRUE(Has(text, "tpserve_request_prefill_time_seconds_count 3"));
  EXPECT_TRUE(Has(text, "tpserve_request_prefill_time_seconds_bucket{le=\"0.5\"} 2"));
  EXPECT_TRUE(Has(text, "tpserve_request_decode_time_seconds_count 3"));
  EXPECT_TRUE(Has(text, "tpserve_request_decode_time_seconds_sum 11"));
  EXPECT_TRUE(Has(text, "tpserve_request_decode_time_seconds_bucket{le=\"2\"} 2"));
  EXPECT_TRUE(Has(text, "tpserve_inter_token_latency_seconds_count 3"));
  EXPECT_TRUE(Has(text, "tpserve_inter_token_latency_seconds_bucket{le=\"0.025\"} 1"));
  EXPECT_TRUE(Has(text, "tpserve_inter_token_latency_seconds_bucket{le=\"0.3\"} 3"));
  EXPECT_TRUE(Has(text, "tpserve_request_prompt_tokens_count 3"));
  EXPECT_TRUE(Has(text, "tpserve_request_prompt_tokens_sum 74"));
  EXPECT_TRUE(Has(text, "tpserve_prompt_tokens_total 74"));
  EXPECT_TRUE(Has(text, "tpserve_request_prompt_tokens_bucket{le=\"10\"} 2"));
  EXPECT_TRUE(Has(text, "tpserve_request_generation_tokens_sum 44"));
  EXPECT_TRUE(Has(text, "tpserve_generation_tokens_total 44"));
  EXPECT_TRUE(Has(text, "tpserve_request_generation_tokens_bucket{le=\"1\"} 1"));
  EXPECT_TRUE(Has(text, "tpserve_request_generation_tokens_bucket{le=\"50\"} 3"));
  // Call-level figures stay per successful call of one completion.
  EXPECT_TRUE(Has(text, "tpserve_time_to_first_token_seconds_count 1"));
  EXPECT_TRUE(Has(text, "tpserve_time_per_output_token_seconds_count 0"));
}

// vLLM's bounds: request_latency_buckets for the stages, its inter-token latency's, and
// build_1_2_5_buckets(max_model_len) for the lengths.
TEST(ServerMetricsTest, BucketBoundsAreVllms) {
  const std::string text = ServerMetrics(2048).Render({}, ServingSnapshot());
  const std::vector<std::string> stages = {
      "0.3", "0.5", "0.8", "1",   "1.5", "2",   "2.5", "5",   "10",   "15",   "20",
      "30",  "40",  "50",  "60",  "120", "240", "480", "960", "1920", "7680", "+Inf"};
  EXPECT_EQ(Bounds(text, "tpserve_request_queue_time_seconds"), stages);
  EXPECT_EQ(Bounds(text, "tpserve_request_prefill_time_seconds"), stages);
  EXPECT_EQ(Bounds(text, "tpserve_request_decode_time_seconds"), stages);
  EXPECT_EQ(Bounds(text, "tpserve_inter_token_latency_seconds"),
            (std::vector<std::string>{"0.01", "0.025", "0.05", "0.075", "0.1", "0.15", "0.2",
                                      "0.3", "0.4", "0.5", "0.75", "1", "2.5", "5", "7.5", "10",
                                      "20", "40", "80", "+Inf"}));
  const std::vector<std::string> lengths = {"1",   "2",   "5",    "10",   "20",  "50",  "100",
                                            "200", "500", "1000", "2000", "+Inf"};
  EXPECT_EQ(Bounds(text, "tpserve_request_prompt_tokens"), lengths);
  EXPECT_EQ(Bounds(text, "tpserve_request_generation_tokens"), lengths);
  EXPECT_EQ(OneTwoFiveBounds(100), (std::vector<double>{1, 2, 5, 10, 20, 50, 100}));
  EXPECT_TRUE(OneTwoFiveBounds(0).empty());
}

TEST(ServerMetricsTest, KvCacheUsageIsTheShareOfBlocksInUse) {
  ServingSnapshot s;
  s.kv_blocks_total = 64;
  s.kv_blocks_in_use = 16;
  EXPECT_TRUE(Has("\n" + ServerMetrics(1).Render({}, s), "tpserve_kv_cache_usage_ratio 0.25"));
  EXPECT_TRUE(Has("\n" + ServerMetrics(1).Render({}, ServingSnapshot()),
                  "tpserve_kv_cache_usage_ratio 0"));  // no pool
}

TEST(ProcessSnapshotTest, ReadsThisProcess) {
  const std::optional<ProcessSnapshot> p = ReadProcessSnapshot();
  ASSERT_TRUE(p.has_value());
  EXPECT_GT(p->resident_memory_bytes, 1 << 20);
  EXPECT_GE(p->virtual_memory_bytes, p->resident_memory_bytes);
  EXPECT_GE(p->open_fds, 3);  // stdin, stdout, stderr
  EXPECT_GE(p->max_fds, p->open_fds);
  EXPECT_GE(p->cpu_seconds, 0);
  const double now = absl::ToUnixSeconds(absl::Now());
  EXPECT_LE(p->start_time_seconds, now + 1);
  EXPECT_GT(p->start_time_seconds, now - 3600);  // a test process started just now
  const std::string text = "\n" + ServerMetrics(1).Render({}, ServingSnapshot());
  const std::regex rss("\nprocess_resident_memory_bytes [1-9]\\d{6,}\n");
  EXPECT_TRUE(std::regex_search(text, rss)) << text;
  EXPECT_TRUE(std::regex_search(text, std::regex("\nprocess_open_fds [1-9]\\d*\n")));
}

}  // namespace
}  // namespace tpserve
