#include "worker/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "worker/kernels/cpu/cpu_threads.h"
#include "worker/sampling/sampler_test_util.h"

namespace tpserve {
namespace {

Tensor Row(std::vector<float> logits) {
  const int64_t vocab = logits.size();
  return Tensor({1, vocab}, std::move(logits));
}

Tensor RandomLogits(int64_t rows, int64_t vocab, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> data(rows * vocab);
  for (float& x : data) x = normal(gen);
  return Tensor({rows, vocab}, std::move(data));
}

SamplingParams Seeded(uint64_t seed) {
  SamplingParams p;
  p.seed = seed;
  return p;
}

// Reference for steps 3–6: probs = softmax(l / T) in double, truncated by a full sort
// and renormalised. Dropped tokens get 0.
std::vector<double> ReferenceProbs(const std::vector<float>& logits,
                                   const SamplingParams& p) {
  const int n = logits.size();
  const double max = *std::max_element(logits.begin(), logits.end());
  std::vector<double> prob(n);
  for (int i = 0; i < n; ++i) prob[i] = std::exp((logits[i] - max) / p.temperature);
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return prob[a] > prob[b]; });
  const int k = p.top_k > 0 ? p.top_k : n;
  double mass = 0;
  for (int i = 0; i < k; ++i) mass += prob[order[i]];
  std::vector<double> kept(n, 0.0);
  double cum = 0, kept_mass = 0;
  for (int i = 0; i < k; ++i) {
    const double q = prob[order[i]];
    if (q < p.min_p * prob[order[0]]) break;
    kept[order[i]] = q;
    kept_mass += q;
    if ((cum += q) >= p.top_p * mass) break;
  }
  for (double& q : kept) q /= kept_mass;
  return kept;
}

// Samples `draws` times from one row (one request per seed, all in one batch).
std::vector<int> Histogram(const Tensor& logits, SamplingParams p,
                           absl::Span<const int32_t> output, int draws) {
  std::vector<SampleRequest> requests(draws);
  for (int i = 0; i < draws; ++i) {
    p.seed = 1000 + i;
    requests[i] = {0, p, {}, output};
  }
  const absl::StatusOr<std::vector<SampleResult>> results = SampleBatch(logits, requests);
  EXPECT_TRUE(results.ok()) << results.status();
  std::vector<int> counts(logits.dim(1));
  for (const SampleResult& r : *results) ++counts[r.token];
  return counts;
}

// Tokens with probability 0 are never drawn; the others fit a chi-square bound far in the
// tail (p < 1e-6 for ≤ 8 degrees of freedom), and draws are deterministic.
void ExpectDistribution(const std::vector<int>& counts, const std::vector<double>& probs) {
  const double draws = std::accumulate(counts.begin(), counts.end(), 0.0);
  double chi2 = 0;
  for (size_t t = 0; t < probs.size(); ++t) {
    if (probs[t] == 0) {
      EXPECT_EQ(counts[t], 0) << "token " << t << " should have been dropped";
      continue;
    }
    const double expected = probs[t] * draws;
    chi2 += (counts[t] - expected) * (counts[t] - expected) / expected;
  }
  EXPECT_LT(chi2, 40.0);
}

const std::vector<float> kEight = {1.0f, 2.0f, 0.5f, 3.0f, 2.5f, -1.0f, 0.0f, 1.5f};

TEST(SamplerTest, GreedyTakesArgmaxAndLowestIdOnTies) {
  SamplingParams p = Seeded(1);
  p.temperature = 0;
  auto r = SampleBatch(Row({0.5f, 2.0f, -1.0f, 2.0f}), {{0, p, {}, {}}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].token, 1);
  r = SampleBatch(Row(kEight), {{0, p, {}, {}}});
  EXPECT_EQ((*r)[0].token, 3);
}

TEST(SamplerTest, TinyTemperatureIsGreedy) {
  for (float t : {1e-3f, 1e-30f, 1e-45f}) {
    SamplingParams p;
    p.temperature = t;
    std::vector<int> counts = Histogram(Row(kEight), p, {}, 200);
    EXPECT_EQ(counts[3], 200) << "temperature " << t;
  }
}

TEST(SamplerTest, TemperatureAndTruncationFollowTheReference) {
  const Tensor logits = Row(kEight);
  std::vector<SamplingParams> cases(7);
  cases[1].temperature = 0.5f;
  cases[2].top_k = 3;
  cases[3].top_p = 0.6f;
  cases[4].min_p = 0.3f;
  cases[5].top_k = 5, cases[5].top_p = 0.8f, cases[5].min_p = 0.1f;
  cases[6].temperature = 2.0f, cases[6].top_p = 0.9f;
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    ExpectDistribution(Histogram(logits, cases[i], {}, 20000),
                       ReferenceProbs(kEight, cases[i]));
  }
}

TEST(SamplerTest, TruncationKeepsExactlyTheReferenceSetOnALargeVocab) {
  const Tensor logits = RandomLogits(1, 5000, 7);
  const std::vector<float> row(logits.data(), logits.data() + logits.numel());
  std::vector<SamplingParams> cases(3);
  cases[0].top_p = 0.95f;  // keeps hundreds: the sorted prefix must grow
  cases[1].top_k = 40;
  cases[2].min_p = 0.05f;
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::vector<double> probs = ReferenceProbs(row, cases[i]);
    const std::vector<int> counts = Histogram(logits, cases[i], {}, 3000);
    int kept = 0, drawn = 0;
    for (size_t t = 0; t < probs.size(); ++t) {
      kept += probs[t] > 0;
      drawn += counts[t] > 0;
      if (probs[t] == 0) {
        EXPECT_EQ(counts[t], 0) << "case " << i << " token " << t;
      }
    }
    EXPECT_GT(drawn, std::min(kept, 20)) << "case " << i;
  }
}

TEST(SamplerTest, PenaltiesMatchHandComputedLogits) {
  // repetition 2 over prompt {0} and output {2, 3, 3}; presence 0.5, frequency 0.25 over
  // output: 2 → 1; 1 stays; −1 → −2 − 0.75; 0.5 → 0.25 − 1.0.
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  const std::vector<int32_t> history = {2, 3, 3};
  std::vector<SampleRequest> requests;
  std::vector<int> counts(4);
  for (int i = 0; i < 20000; ++i) {
    p.seed = i;
    requests.push_back({0, p, {}, history});
  }
  const std::vector<int32_t> prompt = {0};
  for (SampleRequest& r : requests) r.prompt_tokens = prompt;
  auto results = SampleBatch(Row({2.0f, 1.0f, -1.0f, 0.5f}), requests);
  ASSERT_TRUE(results.ok()) << results.status();
  for (const SampleResult& r : *results) ++counts[r.token];
  ExpectDistribution(counts, ReferenceProbs({1.0f, 1.0f, -2.75f, -0.75f}, SamplingParams()));
}

int32_t GreedyToken(std::vector<float> logits, SamplingParams p,
                    std::vector<int32_t> prompt, std::vector<int32_t> output) {
  p.temperature = 0;
  p.seed = 0;
  auto r = SampleBatch(Row(std::move(logits)), {{0, p, prompt, output}});
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? (*r)[0].token : -1;
}

TEST(SamplerTest, PenaltiesChangeTheGreedyChoice) {
  SamplingParams presence, frequency, repetition;
  presence.presence_penalty = 0.2f;
  frequency.frequency_penalty = 0.06f;
  repetition.repetition_penalty = 2.0f;
  EXPECT_EQ(GreedyToken({3.0f, 2.9f}, presence, {}, {0}), 1);
  EXPECT_EQ(GreedyToken({3.0f, 2.9f}, presence, {0}, {}), 0);  // prompt doesn't count
  EXPECT_EQ(GreedyToken({3.0f, 2.9f}, frequency, {}, {0}), 0);  // 2.94
  EXPECT_EQ(GreedyToken({3.0f, 2.9f}, frequency, {}, {0, 0}), 1);  // 2.88
  EXPECT_EQ(GreedyToken({-1.0f, -1.5f}, repetition, {0}, {}), 1);  // −1 · 2
  EXPECT_EQ(GreedyToken({3.0f, 1.6f}, repetition, {0, 0}, {0}), 1);  // once: 1.5
}

// Generates `steps` tokens for each request, batching them in the given order.
std::vector<std::vector<int32_t>> Generate(const std::vector<SamplingParams>& params,
                                           const std::vector<int>& order, int steps) {
  const std::vector<int32_t> prompt = {1, 2, 3};
  std::vector<std::vector<int32_t>> outputs(params.size());
  for (int step = 0; step < steps; ++step) {
    const Tensor logits = RandomLogits(params.size(), 300, step);  // row i for request i
    std::vector<SampleRequest> requests;
    for (int i : order) requests.push_back({i, params[i], prompt, outputs[i]});
    auto results = SampleBatch(logits, requests);
    EXPECT_TRUE(results.ok()) << results.status();
    for (size_t j = 0; j < order.size(); ++j) outputs[order[j]].push_back((*results)[j].token);
  }
  return outputs;
}

TEST(SamplerTest, SeedReproducesTokensWhateverTheBatch) {
  std::vector<SamplingParams> params(3);
  params[0].seed = 42, params[0].top_p = 0.9f, params[0].repetition_penalty = 1.3f;
  params[1].seed = 7, params[1].temperature = 0.0f, params[1].logprobs = 5;
  params[2].seed = 42, params[2].top_k = 20, params[2].frequency_penalty = 0.5f;
  const auto together = Generate(params, {0, 1, 2}, 30);
  EXPECT_EQ(Generate(params, {2, 0, 1}, 30), together);
  // Alone: the same logits rows, only request i in the batch.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(Generate(params, {i}, 30)[i], together[i]);
}

// The rank's compute threads split a batch's requests: on 3 threads each request gets
// what it gets on 1 (its own seed and step), greedy, seeded, penalised and with logprobs.
TEST(SamplerTest, ThreadCountChangesNoResult) {
  std::vector<SamplingParams> params(9);
  for (int i = 0; i < 9; ++i) {
    params[i].seed = 100 + i;
    params[i].temperature = i % 3 == 0 ? 0.0f : 0.7f;
    params[i].top_p = i % 2 ? 0.9f : 1.0f;
    params[i].repetition_penalty = i % 4 == 1 ? 1.2f : 1.0f;
    params[i].logprobs = i % 3;
  }
  const std::vector<int> rows = {0, 1, 2, 3, 4, 5, 6, 7, 8};
  SetCpuThreads(1);
  const auto one = Generate(params, rows, 20);
  SetCpuThreads(3);
  EXPECT_EQ(Generate(params, rows, 20), one);
  SetCpuThreads(1);
}

TEST(SamplerTest, DifferentSeedsAndStepsDiffer) {
  SamplingParams a = Seeded(1), b = Seeded(2);
  const auto outputs = Generate({a, b}, {0, 1}, 40);
  EXPECT_NE(outputs[0], outputs[1]);
  std::vector<int> counts = Histogram(RandomLogits(1, 300, 1), Seeded(0), {}, 500);
  EXPECT_GT(std::count_if(counts.begin(), counts.end(), [](int c) { return c > 0; }), 50);
}

void ExpectRawLogprobs(const float* row, int64_t vocab, const SampleResult& r, int n) {
  const std::vector<double> ref = LogSoftmax(row, vocab);
  EXPECT_NEAR(r.logprob, ref[r.token], 1e-6);
  ASSERT_EQ(static_cast<int>(r.top.size()), n);
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return ref[a] > ref[b]; });
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(r.top[i].token, order[i]) << i;
    EXPECT_NEAR(r.top[i].logprob, ref[order[i]], 1e-6) << i;
  }
}

TEST(SamplerTest, LogprobsAreRawLogSoftmaxWithSortedTopN) {
  const Tensor logits = RandomLogits(2, 1001, 3);
  SamplingParams p = Seeded(5);
  p.logprobs = 20;
  p.temperature = 0.3f;                // not applied to logprobs
  p.repetition_penalty = 1.5f;         // nor are penalties
  const std::vector<int32_t> history = {4, 8, 15};
  auto r = SampleBatch(logits, {{1, p, history, history}, {0, Seeded(6), {}, {}}});
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectRawLogprobs(logits.row(1), 1001, (*r)[0], 20);
  ExpectRawLogprobs(logits.row(0), 1001, (*r)[1], 0);
  // Accumulation stays exact enough over a full-size vocabulary.
  const Tensor large = RandomLogits(1, 152064, 9);
  r = SampleBatch(large, {{0, p, {}, {}}});
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectRawLogprobs(large.row(0), 152064, (*r)[0], 20);
  // Ties in the top-n go to the lower id.
  p.logprobs = 3;
  r = SampleBatch(Row({1.0f, 2.0f, 2.0f, 0.0f, 2.0f}), {{0, p, {}, {}}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0].top[0].token, 1);
  EXPECT_EQ((*r)[0].top[1].token, 2);
  EXPECT_EQ((*r)[0].top[2].token, 4);
}

TEST(SamplerTest, PromptLogprobsScoreTheNextTokens) {
  // Rows for positions 1 and 2 of prompt {9, 0, 2}: they score tokens 2 and then none.
  const Tensor logits({3, 3}, {0, 0, 0, std::log(1.0f), std::log(2.0f), std::log(5.0f),
                               7, 7, 7});
  auto r = PromptLogprobs(logits, 1, {2}, 2);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].token, 2);
  EXPECT_NEAR((*r)[0].logprob, std::log(5.0 / 8), 1e-6);
  ASSERT_EQ((*r)[0].top.size(), 2u);
  EXPECT_EQ((*r)[0].top[1].token, 1);
  EXPECT_NEAR((*r)[0].top[1].logprob, std::log(2.0 / 8), 1e-6);
  r = PromptLogprobs(logits, 0, {1, 1, 1}, 0);
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR((*r)[2].logprob, std::log(1.0 / 3), 1e-6);
  EXPECT_FALSE(PromptLogprobs(logits, 1, {1, 1, 1}, 0).ok());  // rows 1..3
  EXPECT_FALSE(PromptLogprobs(logits, 0, {3}, 0).ok());        // token ≥ vocab
  EXPECT_FALSE(PromptLogprobs(logits, 0, {0}, 21).ok());
}

void ExpectInvalid(const SamplingParams& p, const std::string& field) {
  const absl::Status s = p.Validate(100);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field;
  EXPECT_NE(s.message().find(field + " must be"), std::string::npos) << s;
}

TEST(SamplerTest, ValidateNamesTheField) {
  EXPECT_TRUE(SamplingParams().Validate(100).ok());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  SamplingParams p;
  p.top_k = -1;
  EXPECT_TRUE(p.Validate(100).ok());
  p.top_k = 100;
  EXPECT_TRUE(p.Validate(100).ok());
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<std::pair<std::string, std::function<void(SamplingParams&)>>> bad = {
      {"temperature", [](SamplingParams& p) { p.temperature = -0.1f; }},
      {"temperature", [=](SamplingParams& p) { p.temperature = nan; }},
      {"temperature", [=](SamplingParams& p) { p.temperature = inf; }},
      {"top_k", [](SamplingParams& p) { p.top_k = -2; }},
      {"top_k", [](SamplingParams& p) { p.top_k = 101; }},
      {"top_p", [](SamplingParams& p) { p.top_p = 0.0f; }},
      {"top_p", [](SamplingParams& p) { p.top_p = 1.01f; }},
      {"top_p", [=](SamplingParams& p) { p.top_p = nan; }},
      {"min_p", [](SamplingParams& p) { p.min_p = -0.1f; }},
      {"min_p", [](SamplingParams& p) { p.min_p = 1.01f; }},
      {"min_p", [=](SamplingParams& p) { p.min_p = nan; }},
      {"repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = 0.0f; }},
      {"repetition_penalty", [=](SamplingParams& p) { p.repetition_penalty = nan; }},
      {"repetition_penalty", [=](SamplingParams& p) { p.repetition_penalty = inf; }},
      {"presence_penalty", [](SamplingParams& p) { p.presence_penalty = 2.01f; }},
      {"presence_penalty", [=](SamplingParams& p) { p.presence_penalty = nan; }},
      {"frequency_penalty", [](SamplingParams& p) { p.frequency_penalty = -2.5f; }},
      {"frequency_penalty", [=](SamplingParams& p) { p.frequency_penalty = nan; }},
      {"logprobs", [](SamplingParams& p) { p.logprobs = -1; }},
      {"logprobs", [](SamplingParams& p) { p.logprobs = 21; }},
      {"prompt_logprobs", [](SamplingParams& p) { p.prompt_logprobs = 21; }},
  };
  for (const auto& [field, set] : bad) {
    SamplingParams q;
    set(q);
    ExpectInvalid(q, field);
  }
}

TEST(SamplerTest, MalformedRequestsFailWithoutCrashing) {
  const Tensor logits = RandomLogits(2, 10, 1);
  const std::vector<int32_t> good = {1, 2}, negative = {3, -1}, too_big = {10};
  const auto status = [&](SampleRequest r) {
    return SampleBatch(logits, {{0, Seeded(1), {}, {}}, r}).status();
  };
  EXPECT_NE(status({0, Seeded(1), too_big, good}).message().find("prompt_tokens[0]"),
            std::string::npos);
  EXPECT_NE(status({0, Seeded(1), good, negative}).message().find("request 1"),
            std::string::npos);
  EXPECT_FALSE(status({2, Seeded(1), {}, {}}).ok());             // no such row
  EXPECT_FALSE(status({0, SamplingParams(), {}, {}}).ok());      // engine left no seed
  SamplingParams bad = Seeded(1);
  bad.top_p = 0;
  EXPECT_FALSE(status({0, bad, {}, {}}).ok());
  EXPECT_FALSE(SampleBatch(Tensor({4}), {}).ok());  // not [rows, vocab]
}

// A request whose own row is not finite, or whose penalties overflow it, fails alone:
// the batch succeeds, that result carries the error, and the others are exactly what
// they are without it.
TEST(SamplerTest, ARequestsOwnFailureLeavesTheOthersUntouched) {
  Tensor logits = RandomLogits(4, 50, 3);
  logits.row(1)[7] = std::numeric_limits<float>::quiet_NaN();
  logits.row(2)[9] = 1e37f;  // finite, but not divided by 0.01
  SamplingParams penalised = Seeded(5);
  penalised.repetition_penalty = 0.01f;
  const std::vector<int32_t> nine = {9};
  const SampleRequest good0{0, Seeded(1), {}, {}}, good3{3, Seeded(2), {}, {}};
  const auto alone = SampleBatch(logits, {good0, good3});
  ASSERT_TRUE(alone.ok()) << alone.status();
  const auto mixed =
      SampleBatch(logits, {good0, {1, Seeded(4), {}, {}}, {2, penalised, nine, {}}, good3});
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  ASSERT_EQ(mixed->size(), 4u);
  EXPECT_EQ((*mixed)[1].status.code(), absl::StatusCode::kInternal);
  EXPECT_NE((*mixed)[1].status.message().find("not finite"), std::string::npos);
  EXPECT_EQ((*mixed)[2].status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE((*mixed)[2].status.message().find("repetition_penalty"), std::string::npos);
  EXPECT_EQ((*mixed)[1].token, -1);
  for (auto [m, a] : {std::pair{0, 0}, std::pair{3, 1}}) {
    EXPECT_TRUE((*mixed)[m].status.ok());
    EXPECT_EQ((*mixed)[m].token, (*alone)[a].token);
    EXPECT_EQ((*mixed)[m].logprob, (*alone)[a].logprob);
  }
}

}  // namespace
}  // namespace tpserve
