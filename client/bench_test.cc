#include "client/bench.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <numeric>
#include <set>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace tpserve {
namespace {

TEST(BenchStatsTest, PercentileInterpolatesLikeNumpy) {
  EXPECT_EQ(Percentile({}, 50), 0);
  EXPECT_DOUBLE_EQ(Percentile({3, 1, 2, 4}, 50), 2.5);
  EXPECT_DOUBLE_EQ(Percentile({1, 2, 3, 4, 5}, 99), 4.96);
  EXPECT_DOUBLE_EQ(Percentile({7}, 99), 7);
}

TEST(BenchStatsTest, ReportFromTimings) {
  RequestTiming a{true, "", 0.1, 0.5, {0.2, 0.2}, 5, 8, 20};
  RequestTiming b{true, "", 0.3, 0.7, {0.4}, 3, 0, 12};
  RequestTiming failed{false, "UNAVAILABLE", 0, 0.05, {}, 0, 4, 16};
  const BenchReport r = MakeReport({a, b, failed}, 2.0);
  EXPECT_EQ(r.completed, 2);
  EXPECT_EQ(r.failed, 1);
  EXPECT_EQ(r.errors.at("UNAVAILABLE"), 1);
  EXPECT_EQ(r.input_tokens, 32);
  EXPECT_EQ(r.input_lens, (std::vector<int>{20, 12}));
  EXPECT_EQ(r.output_lens, (std::vector<int>{5, 3}));
  EXPECT_EQ(ReportJson(r)["input_lens"], nlohmann::json({20, 12}));
  EXPECT_EQ(r.output_tokens, 8);
  EXPECT_EQ(r.cached_prompt_tokens, 8);  // completed requests only
  EXPECT_EQ(ReportJson(r)["cached_prompt_tokens"], 8);
  EXPECT_NE(ReportText(r).find("input tokens 32 (8 from the prefix cache)"), std::string::npos);
  EXPECT_DOUBLE_EQ(r.request_throughput, 1.0);
  EXPECT_DOUBLE_EQ(r.output_throughput, 4.0);
  EXPECT_NEAR(r.ttft_ms.mean, 200, 1e-9);
  EXPECT_NEAR(r.tpot_ms.mean, (100 + 200) / 2.0, 1e-9);  // (0.4/4, 0.4/2) s
  EXPECT_NEAR(r.itl_ms.median, 200, 1e-9);
  EXPECT_NEAR(r.e2e_ms.p99, 698, 1e-9);
  EXPECT_EQ(ReportJson(r)["errors"]["UNAVAILABLE"], 1);
  EXPECT_NE(ReportText(r).find("failures UNAVAILABLE: 1"), std::string::npos);
}

// vllm bench serve's extras: std, chosen percentiles, total-token throughput, goodput
// under SLOs (every SLO given must hold).
TEST(BenchStatsTest, PercentilesStdThroughputAndGoodput) {
  const Distribution d = Summarize({1, 2, 3, 4}, {50, 90, 99.9});
  EXPECT_DOUBLE_EQ(d.std, std::sqrt(1.25));  // numpy.std([1, 2, 3, 4])
  ASSERT_EQ(d.percentiles.size(), 3u);
  EXPECT_DOUBLE_EQ(d.percentiles[1].second, 3.7);  // numpy.percentile(..., 90)
  EXPECT_DOUBLE_EQ(d.percentiles[2].first, 99.9);
  // a: TTFT 100 ms, TPOT 100 ms; b: TTFT 300 ms, TPOT 200 ms; c: one token (no TPOT).
  RequestTiming a{true, "", 0.1, 0.5, {0.2, 0.2}, 5, 0, 16};
  RequestTiming b{true, "", 0.3, 0.7, {0.4}, 3, 0, 16};
  RequestTiming c{true, "", 0.05, 0.05, {}, 1, 0, 16};
  ReportOptions options;
  options.percentiles = {50, 90};
  ASSERT_TRUE(ParseGoodput({"ttft:200", "tpot:150"}, &options).ok());
  const BenchReport r = MakeReport({a, b, c}, 2.0, options);
  EXPECT_DOUBLE_EQ(r.total_token_throughput, (48 + 9) / 2.0);
  EXPECT_TRUE(r.has_goodput);
  EXPECT_EQ(r.good_requests, 2);  // a and c; b misses both
  EXPECT_DOUBLE_EQ(r.request_goodput, 1.0);
  const nlohmann::json j = ReportJson(r);
  EXPECT_EQ(j["good_requests"], 2);
  EXPECT_TRUE(j["ttft_ms"].contains("p90"));
  EXPECT_TRUE(j["ttft_ms"].contains("std"));
  EXPECT_NE(ReportText(r).find("goodput 1.00 req/s (2 of 3 requests met every SLO)"),
            std::string::npos);
  EXPECT_NE(ReportText(r).find("p90"), std::string::npos);
  // Without SLOs there is no goodput line or field.
  EXPECT_EQ(ReportText(MakeReport({a}, 1.0)).find("goodput"), std::string::npos);
  EXPECT_FALSE(ReportJson(MakeReport({a}, 1.0)).contains("request_goodput"));
  ReportOptions e2e;
  ASSERT_TRUE(ParseGoodput({"e2el:600"}, &e2e).ok());
  EXPECT_EQ(MakeReport({a, b, c}, 1.0, e2e).good_requests, 2);  // b took 700 ms
}

TEST(BenchStatsTest, BadPercentilesAndSlosAreRefusedByName) {
  EXPECT_EQ(*ParsePercentiles("50,99.9"), (std::vector<double>{50, 99.9}));
  for (const char* bad : {"", "0", "101", "50,x", "-1"}) {
    const absl::StatusOr<std::vector<double>> got = ParsePercentiles(bad);
    ASSERT_FALSE(got.ok()) << bad;
    EXPECT_NE(got.status().message().find("--percentiles"), std::string::npos);
  }
  ReportOptions o;
  ASSERT_TRUE(ParseGoodput({"ttft:500,tpot:50", "e2el:9000"}, &o).ok());
  EXPECT_DOUBLE_EQ(o.slo_ttft_ms, 500);
  EXPECT_DOUBLE_EQ(o.slo_tpot_ms, 50);
  EXPECT_DOUBLE_EQ(o.slo_e2el_ms, 9000);
  for (const char* bad : {"ttft", "ttft:0", "itl:5", "ttft:-3", "tpot:abc", "e2el:inf"}) {
    ReportOptions r;
    const absl::Status s = ParseGoodput({bad}, &r);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.message().find("--goodput"), std::string::npos) << s;
  }
}

TEST(BenchStatsTest, StepCountersGiveFrontendOverheadPerStep) {
  BenchReport r;
  AddStepCounters(0, 0, 0, &r);
  EXPECT_EQ(ReportText(r).find("engine steps"), std::string::npos);
  AddStepCounters(4, 10000, 8000, &r);
  EXPECT_DOUBLE_EQ(r.step_wall_ms, 2.5);
  EXPECT_DOUBLE_EQ(r.worker_compute_ms, 2.0);
  EXPECT_DOUBLE_EQ(ReportJson(r)["frontend_overhead_ms"].get<double>(), 0.5);
  EXPECT_NE(ReportText(r).find("frontend overhead 0.500 ms"), std::string::npos);
}

TEST(BenchTest, PromptsAreSeededAndInTheVocabulary) {
  const auto a = RandomPrompts(4, 16, 50, 7);
  EXPECT_EQ(a, RandomPrompts(4, 16, 50, 7));
  EXPECT_NE(a, RandomPrompts(4, 16, 50, 8));
  for (const auto& prompt : a) {
    ASSERT_EQ(prompt.size(), 16u);
    for (int32_t id : prompt) EXPECT_TRUE(id >= 0 && id < 50);
  }
}

TEST(BenchTest, SharedPrefixPromptsShareExactlyTheirPrefix) {
  const auto a = SharedPrefixPrompts(4, 10, 16, 50, 7);
  const auto own = RandomPrompts(4, 16, 50, 7);
  ASSERT_EQ(a.size(), 4u);
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].size(), 26u);
    EXPECT_TRUE(std::equal(a[i].begin(), a[i].begin() + 10, a[0].begin()));
    EXPECT_EQ(std::vector<int32_t>(a[i].begin() + 10, a[i].end()), own[i]);
  }
  EXPECT_NE(a[0], a[1]);
  EXPECT_EQ(SharedPrefixPrompts(4, 0, 16, 50, 7), own);
}

TEST(BenchTest, RandomDatasetSpreadsLengthsWithinTheRatio) {
  EXPECT_EQ(RangeAround(100, 0.25).low, 75);
  EXPECT_EQ(RangeAround(100, 0.25).high, 125);
  EXPECT_EQ(RangeAround(3, 0.9).low, 1);  // never 0 tokens
  EXPECT_EQ(RangeAround(3, 0.9).high, 6);
  EXPECT_EQ(RangeAround(7, 0).low, 7);
  EXPECT_EQ(RangeAround(7, 0).high, 7);
  BenchOptions o;
  o.input_len = 40;
  o.output_len = 20;
  o.prefix_len = 5;
  // Ratio 0: the fixed-length prompts, each asking for output_len.
  const std::vector<BenchPrompt> fixed = RandomDataset(o, 6, 50, 3);
  const auto ids = SharedPrefixPrompts(6, 5, 40, 50, 3);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(fixed[i].ids, ids[i]);
    EXPECT_EQ(fixed[i].output_len, 20);
  }
  o.random_range_ratio = 0.5;
  const std::vector<BenchPrompt> spread = RandomDataset(o, 400, 50, 3);
  EXPECT_EQ(spread, RandomDataset(o, 400, 50, 3));
  std::set<size_t> in_lens;
  std::set<int> out_lens;
  for (const BenchPrompt& p : spread) {
    ASSERT_GE(p.ids.size(), 5u + 20);
    ASSERT_LE(p.ids.size(), 5u + 60);
    EXPECT_TRUE(std::equal(p.ids.begin(), p.ids.begin() + 5, ids[0].begin()));
    for (int32_t id : p.ids) ASSERT_TRUE(id >= 0 && id < 50);
    ASSERT_GE(p.output_len, 10);
    ASSERT_LE(p.output_len, 30);
    in_lens.insert(p.ids.size());
    out_lens.insert(p.output_len);
  }
  // Every length of the range is drawn (41 input lengths, 21 output lengths).
  EXPECT_EQ(in_lens.size(), 41u);
  EXPECT_EQ(out_lens.size(), 21u);
}

TEST(BenchTest, ArrivalsArePoissonAtTheRate) {
  EXPECT_EQ(ArrivalOffsets(3, 0, 1), (std::vector<double>{0, 0, 0}));
  const std::vector<double> t = ArrivalOffsets(20000, 10, 1);
  EXPECT_EQ(t.front(), 0);
  for (size_t i = 1; i < t.size(); ++i) ASSERT_GE(t[i], t[i - 1]);
  EXPECT_NEAR(t.back() / static_cast<double>(t.size() - 1), 0.1, 0.005);
}

// Gamma gaps with the same mean; burstier below 1 (coefficient of variation 1/sqrt(B)).
TEST(BenchTest, BurstinessKeepsTheRateAndChangesTheSpread) {
  for (double burstiness : {0.25, 4.0}) {
    const std::vector<double> t = ArrivalOffsets(20000, 10, 1, burstiness);
    for (size_t i = 1; i < t.size(); ++i) ASSERT_GE(t[i], t[i - 1]);
    EXPECT_NEAR(t.back() / static_cast<double>(t.size() - 1), 0.1, 0.01) << burstiness;
    double squares = 0;
    for (size_t i = 1; i < t.size(); ++i) squares += (t[i] - t[i - 1] - 0.1) * (t[i] - t[i - 1] - 0.1);
    const double cv = std::sqrt(squares / static_cast<double>(t.size() - 1)) / 0.1;
    EXPECT_NEAR(cv, 1 / std::sqrt(burstiness), 0.1) << burstiness;
  }
  EXPECT_EQ(ArrivalOffsets(50, 10, 3, 1.0), ArrivalOffsets(50, 10, 3));  // Poisson as before
}

TEST(BenchTest, ClockCountsOnlyChunksWithTokens) {
  RequestTiming t;
  RequestClock clock;
  clock.Chunk(0, &t);  // a chunk of text or usage only
  EXPECT_EQ(t.output_tokens, 0);
  absl::SleepFor(absl::Milliseconds(20));
  clock.Chunk(2, &t);
  clock.Chunk(0, &t);
  absl::SleepFor(absl::Milliseconds(20));
  clock.Chunk(3, &t);
  clock.Finish(&t);
  EXPECT_EQ(t.output_tokens, 5);
  EXPECT_GE(t.ttft_s, 0.02);
  ASSERT_EQ(t.itl_s.size(), 1u);
  EXPECT_GE(t.itl_s[0], 0.02);
  EXPECT_GE(t.e2e_s, t.ttft_s + t.itl_s[0]);
}

TEST(BenchTest, RunBenchTimesEachPromptOnceWithinTheConcurrency) {
  BenchOptions o;
  o.num_prompts = 12;
  o.input_len = 4;
  o.concurrency = 3;
  std::atomic<int> in_flight{0}, most{0}, calls{0};
  std::vector<int> ended;
  absl::Mutex mu;
  BenchHooks hooks;
  hooks.on_done = [&](int done) {
    absl::MutexLock lock(&mu);
    ended.push_back(done);
  };
  const absl::StatusOr<BenchReport> r =
      RunBench(o, RandomDataset(o, 12, 50, 0), {},
               [&](const BenchPrompt& prompt) {
                 const int now = ++in_flight;
                 int seen = most.load();
                 while (now > seen && !most.compare_exchange_weak(seen, now)) {
                 }
                 ++calls;
                 absl::SleepFor(absl::Milliseconds(10));
                 --in_flight;
                 RequestTiming t;
                 t.ok = prompt.ids.size() == 4;
                 t.output_tokens = 1;
                 return t;
               },
               hooks);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(calls.load(), 12);
  EXPECT_LE(most.load(), 3);
  EXPECT_EQ(r->completed, 12);
  EXPECT_EQ(r->output_tokens, 12);
  EXPECT_EQ(r->input_tokens, 48);
  std::sort(ended.begin(), ended.end());
  ASSERT_EQ(ended.size(), 12u);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(ended[i], i + 1);
}

// Warm-ups go first, one at a time, then before_run, then the measured prompts; the
// warm-ups are not counted, and a failing before_run ends the run before any is sent.
TEST(BenchTest, WarmupsRunFirstThenBeforeRunAndAreNotCounted) {
  BenchOptions o;
  o.num_prompts = 4;
  o.input_len = 6;
  o.num_warmups = 3;
  const auto measured = RandomDataset(o, 4, 50, 9);
  const auto warmups = RandomDataset(o, 3, 50, ~9ULL);
  std::vector<BenchPrompt> seen;
  int seen_before_run = -1;
  absl::Mutex mu;
  const RequestTimer timer = [&](const BenchPrompt& prompt) {
    absl::MutexLock lock(&mu);
    seen.push_back(prompt);
    RequestTiming t;
    t.ok = true;
    t.output_tokens = 1;
    return t;
  };
  BenchHooks hooks;
  hooks.before_run = [&] {
    absl::MutexLock lock(&mu);
    seen_before_run = static_cast<int>(seen.size());
    return absl::OkStatus();
  };
  const absl::StatusOr<BenchReport> r = RunBench(o, measured, warmups, timer, hooks);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(seen.size(), 7u);
  EXPECT_EQ(seen_before_run, 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(seen[i], warmups[i]) << i;
  for (int i = 3; i < 7; ++i) {
    EXPECT_EQ(std::count(measured.begin(), measured.end(), seen[i]), 1) << i;
  }
  EXPECT_EQ(r->completed, 4);

  seen.clear();
  hooks.before_run = [] { return absl::FailedPreconditionError("no reset here"); };
  const absl::StatusOr<BenchReport> refused = RunBench(o, measured, {}, timer, hooks);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(seen.empty());
}

}  // namespace
}  // namespace tpserve
