#include "client/bench.h"

#include <algorithm>
#include <atomic>
#include <numeric>

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
  RequestTiming a{true, "", 0.1, 0.5, {0.2, 0.2}, 5, 8};
  RequestTiming b{true, "", 0.3, 0.7, {0.4}, 3, 0};
  RequestTiming failed{false, "UNAVAILABLE", 0, 0.05, {}, 0, 4};
  const BenchReport r = MakeReport({a, b, failed}, 2.0, 16);
  EXPECT_EQ(r.completed, 2);
  EXPECT_EQ(r.failed, 1);
  EXPECT_EQ(r.errors.at("UNAVAILABLE"), 1);
  EXPECT_EQ(r.input_tokens, 32);
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

TEST(BenchTest, ArrivalsArePoissonAtTheRate) {
  EXPECT_EQ(ArrivalOffsets(3, 0, 1), (std::vector<double>{0, 0, 0}));
  const std::vector<double> t = ArrivalOffsets(20000, 10, 1);
  EXPECT_EQ(t.front(), 0);
  for (size_t i = 1; i < t.size(); ++i) ASSERT_GE(t[i], t[i - 1]);
  EXPECT_NEAR(t.back() / static_cast<double>(t.size() - 1), 0.1, 0.005);
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
  const BenchReport r = RunBench(o, 50, [&](const std::vector<int32_t>& prompt) {
    const int now = ++in_flight;
    int seen = most.load();
    while (now > seen && !most.compare_exchange_weak(seen, now)) {
    }
    ++calls;
    absl::SleepFor(absl::Milliseconds(10));
    --in_flight;
    RequestTiming t;
    t.ok = prompt.size() == 4;
    t.output_tokens = 1;
    return t;
  });
  EXPECT_EQ(calls.load(), 12);
  EXPECT_LE(most.load(), 3);
  EXPECT_EQ(r.completed, 12);
  EXPECT_EQ(r.output_tokens, 12);
}

}  // namespace
}  // namespace tpserve
