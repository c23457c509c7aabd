// CudaSampler against the CPU sampler (worker/sampling/sampler.h) on the same logits: greedy
// tokens and top-n ids identical, logprobs within 1e-5, seeded draws the CPU's token in
// ≥ 99% of draws and never outside the CPU's truncation, the same errors. Tagged "gpu";
// skips when no CUDA device is present.
#include "worker/sampling/cuda_sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "worker/cuda/cuda_test_util.h"
#include "worker/sampling/sampler.h"
#include "worker/sampling/sampler_test_util.h"
#include "worker/sampling/sampling_rules.h"
#include "worker/tensor.h"

namespace tpserve {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

Tensor RandomLogits(int64_t rows, int64_t vocab, uint32_t seed) {
  return Tensor({rows, vocab}, RandomVector(rows * vocab, seed, 3.0f));
}

// A sampler and a device copy of the logits, on a stream of the test's own.
class Gpu {
 public:
  explicit Gpu(const Tensor& logits, int max_rows = 64)
      : host_(logits), device_(std::vector<float>(logits.data(), logits.data() + logits.numel())) {
    cudaStreamCreate(&stream_);
    auto s = CudaSampler::Create(logits.dim(1), max_rows, stream_);
    EXPECT_TRUE(s.ok()) << s.status();
    if (s.ok()) sampler_ = *std::move(s);
  }
  ~Gpu() {
    sampler_.reset();
    cudaStreamDestroy(stream_);
  }
  absl::StatusOr<std::vector<SampleResult>> Sample(absl::Span<const SampleRequest> r) {
    return sampler_->SampleBatch(device_.get(), host_.dim(0), r);
  }
  absl::StatusOr<std::vector<SampleResult>> Prompt(int64_t first, absl::Span<const int32_t> t,
                                                   int n) {
    return sampler_->PromptLogprobs(device_.get(), host_.dim(0), first, t, n);
  }

 private:
  const Tensor& host_;
  DeviceArray<float> device_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<CudaSampler> sampler_;
};

// Same token logprob within 1e-5 and the same top-n ids (both order by logit, then id).
void ExpectSameLogprobs(const SampleResult& gpu, const SampleResult& cpu, float cpu_logprob) {
  EXPECT_NEAR(gpu.logprob, cpu_logprob, 1e-5);
  ASSERT_EQ(gpu.top.size(), cpu.top.size());
  for (size_t i = 0; i < cpu.top.size(); ++i) {
    EXPECT_EQ(gpu.top[i].token, cpu.top[i].token) << "top " << i;
    EXPECT_NEAR(gpu.top[i].logprob, cpu.top[i].logprob, 1e-5) << "top " << i;
  }
}

// The tokens a draw may return: the CPU's steps 1–6 in double, each cut loosened by a
// relative 1e-5 so that only tokens dropped by more than rounding are excluded.
std::vector<bool> AllowedTokens(const float* raw, int64_t n, const SampleRequest& r) {
  const SamplingParams& p = r.params;
  std::vector<float> l(raw, raw + n);
  if (p.repetition_penalty != 1.0f) {
    std::vector<bool> seen(n);
    for (auto part : {r.prompt_tokens, r.output_tokens}) {
      for (int32_t t : part) {
        if (!seen[t]) l[t] = RepetitionPenalised(raw[t], p.repetition_penalty), seen[t] = true;
      }
    }
  }
  std::vector<int32_t> counts(n);
  for (int32_t t : r.output_tokens) ++counts[t];
  for (int64_t t = 0; t < n; ++t) {
    if (counts[t] > 0 && (p.presence_penalty != 0 || p.frequency_penalty != 0)) {
      l[t] -= PresenceFrequencyPenalty(p.presence_penalty, p.frequency_penalty, counts[t]);
    }
  }
  const double max = *std::max_element(l.begin(), l.end());
  const float scale = 1.0f / p.temperature;
  std::vector<double> w(n);
  for (int64_t i = 0; i < n; ++i) w[i] = std::exp((l[i] - max) * scale);
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return l[a] > l[b]; });
  const int64_t k = p.top_k > 0 && p.top_k < n ? p.top_k : n;
  double mass = 0;
  for (int64_t i = 0; i < k; ++i) mass += w[order[i]];
  std::vector<bool> allowed(n);
  double cum = 0;
  for (int64_t i = 0; i < k; ++i) {
    if (i > 0 && w[order[i]] < p.min_p * (1 - 1e-5)) break;
    allowed[order[i]] = true;
    cum += w[order[i]];
    if (p.top_p < 1 && cum >= p.top_p * mass * (1 + 1e-5)) break;
  }
  return allowed;
}

// Runs the requests on both samplers and compares: logprobs and top-n always, tokens
// identical in at least `min_same` of the requests and always allowed. Requests on one
// row must differ in their seed only (the reference work is done once per row).
void ExpectMatchesCpu(Gpu& gpu, const Tensor& logits, const std::vector<SampleRequest>& r,
                      double min_same) {
  const auto cpu = SampleBatch(logits, r);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  const auto got = gpu.Sample(r);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), r.size());
  const int64_t vocab = logits.dim(1);
  std::map<int64_t, std::pair<std::vector<double>, std::vector<bool>>> per_row;
  int same = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    const float* row = logits.row(r[i].row);
    auto [it, fresh] = per_row.try_emplace(r[i].row);
    auto& [log_softmax, allowed] = it->second;
    if (fresh) {
      log_softmax = LogSoftmax(row, vocab);
      if (!IsGreedy(r[i].params)) allowed = AllowedTokens(row, vocab, r[i]);
    }
    const SampleResult& g = (*got)[i];
    ASSERT_GE(g.token, 0);
    ASSERT_LT(g.token, vocab);
    same += g.token == (*cpu)[i].token;
    ExpectSameLogprobs(g, (*cpu)[i], log_softmax[g.token]);
    if (!allowed.empty()) {
      EXPECT_TRUE(allowed[(*cpu)[i].token]) << "the reference's own token";
      EXPECT_TRUE(allowed[g.token]) << "token " << g.token << " is truncated away";
    }
  }
  EXPECT_GE(same, min_same * r.size()) << same << " of " << r.size() << " the CPU's token";
}

// Histories with repeats: prompt of 12 tokens, output of 20, ids from a small range.
struct Histories {
  explicit Histories(int n, int64_t vocab, uint32_t seed) : prompt(n), output(n) {
    std::mt19937 gen(seed);
    std::uniform_int_distribution<int32_t> id(0, std::min<int64_t>(vocab, 64) - 1);
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < 12; ++j) prompt[i].push_back(id(gen));
      for (int j = 0; j < 20; ++j) output[i].push_back(id(gen));
    }
  }
  std::vector<std::vector<int32_t>> prompt, output;
};

std::vector<SampleRequest> Requests(const SamplingParams& p, int rows, int seeds,
                                    const Histories* h) {
  std::vector<SampleRequest> r;
  for (int s = 0; s < seeds; ++s) {
    for (int row = 0; row < rows; ++row) {
      SampleRequest q{row, p, {}, {}};
      q.params.seed = 7919 * s + row;
      if (h != nullptr) q.prompt_tokens = h->prompt[row], q.output_tokens = h->output[row];
      r.push_back(q);
    }
  }
  return r;
}

TEST(CudaSamplerTest, GreedyAndLogprobsMatchCpu) {
  TPSERVE_SKIP_WITHOUT_CUDA();
  for (auto [vocab, rows] : {std::pair<int64_t, int>{509, 1}, {509, 64}, {4099, 7},
                             {128256, 64}}) {
    SCOPED_TRACE("vocab " + std::to_string(vocab) + " rows " + std::to_string(rows));
    const Tensor logits = RandomLogits(rows, vocab, vocab + rows);
    const Histories h(rows, vocab, 1);
    Gpu gpu(logits);
    for (int n : {0, 1, 20}) {
      SamplingParams p;
      p.temperature = 0;
      p.logprobs = n;
      ExpectMatchesCpu(gpu, logits, Requests(p, rows, 1, nullptr), 1.0);
      p.repetition_penalty = 1.7f, p.presence_penalty = 0.9f, p.frequency_penalty = 0.4f;
      ExpectMatchesCpu(gpu, logits, Requests(p, rows, 1, &h), 1.0);
    }
  }
}

TEST(CudaSamplerTest, DrawsMatchCpu) {
  TPSERVE_SKIP_WITHOUT_CUDA();
  std::vector<SamplingParams> cases(13);
  cases[1].temperature = 0.7f;
  cases[2].temperature = 1.5f, cases[2].min_p = 0.05f;
  cases[3].top_k = 1;
  cases[4].top_k = 40;
  cases[5].top_k = 5000, cases[5].temperature = 0.5f;
  cases[6].top_p = 0.9f;
  cases[7].top_p = 0.999f, cases[7].temperature = 2.0f;  // keeps most of the row
  cases[8].top_p = 0.3f, cases[8].min_p = 0.2f;
  cases[9].top_k = 50, cases[9].top_p = 0.8f, cases[9].min_p = 0.02f;
  cases[10].repetition_penalty = 1.3f, cases[10].frequency_penalty = 0.5f;
  cases[11].top_p = 0.95f, cases[11].presence_penalty = -1.0f;  // boosts history tokens
  cases[12].top_k = 100, cases[12].repetition_penalty = 0.8f, cases[12].logprobs = 5;
  for (auto [vocab, seeds] : {std::pair<int64_t, int>{509, 40}, {128256, 6}}) {
    const int rows = 64;
    const Tensor logits = RandomLogits(rows, vocab, 11);
    const Histories h(rows, vocab, 2);
    Gpu gpu(logits);
    for (size_t c = 0; c < cases.size(); ++c) {
      SCOPED_TRACE("vocab " + std::to_string(vocab) + " case " + std::to_string(c));
      SamplingParams p = cases[c];
      p.top_k = std::min<int64_t>(p.top_k, vocab - 9);  // 5000 on the small vocab: 500
      ExpectMatchesCpu(gpu, logits, Requests(p, rows, seeds, c >= 10 ? &h : nullptr), 0.99);
    }
    SamplingParams last;  // top_k = vocab − 1: the largest k that still truncates
    last.top_k = vocab - 1, last.top_p = 0.97f;
    ExpectMatchesCpu(gpu, logits, Requests(last, rows, 2, nullptr), 0.99);
  }
}

TEST(CudaSamplerTest, TiesMaskedAndFlatRowsMatchCpu) {
  TPSERVE_SKIP_WITHOUT_CUDA();
  const int64_t vocab = 4099;
  const int rows = 4;
  std::vector<float> data = RandomVector(rows * vocab, 5, 2.0f);
  for (int64_t i = 0; i < vocab; ++i) {
    data[i] = std::round(data[i] * 2) / 2;            // row 0: few distinct values
    data[vocab + i] = i % 97 == 3 ? data[vocab + i] : -kInf;  // row 1: mostly masked
    data[2 * vocab + i] = 1.5f;                        // row 2: flat
    data[3 * vocab + i] = i % 2 ? -0.0f : 0.0f;        // row 3: signed zeros
  }
  const Tensor logits({rows, vocab}, std::move(data));
  Gpu gpu(logits);
  std::vector<SamplingParams> cases(6);
  cases[0].temperature = 0, cases[0].logprobs = 20;
  cases[1].logprobs = 20;
  cases[2].top_k = 10;
  cases[3].top_k = 300, cases[3].top_p = 0.5f;
  cases[4].top_p = 0.3f;
  cases[5].min_p = 0.5f;
  for (size_t c = 0; c < cases.size(); ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    const auto r = Requests(cases[c], rows, 60, nullptr);
    ExpectMatchesCpu(gpu, logits, r, 0.99);
    // Equal weights are exactly 1 on both sides: the flat and zero rows match exactly.
    const auto cpu = SampleBatch(logits, r);
    const auto got = gpu.Sample(r);
    ASSERT_TRUE(cpu.ok() && got.ok());
    for (size_t i = 0; i < r.size(); ++i) {
      if (r[i].row >= 2) {
        EXPECT_EQ((*got)[i].token, (*cpu)[i].token) << "request " << i;
      }
    }
  }
}

TEST(CudaSamplerTest, ResultsDependOnlyOnTheRequest) {
  TPSERVE_SKIP_WITHOUT_CUDA();
  const Tensor logits = RandomLogits(16, 3001, 3);
  const Histories h(16, 3001, 4);
  SamplingParams p;
  p.top_p = 0.9f, p.repetition_penalty = 1.2f, p.logprobs = 3;
  std::vector<SampleRequest> r = Requests(p, 16, 3, &h);
  Gpu gpu(logits, /*max_rows=*/5);  // several pieces
  const auto first = gpu.Sample(r);
  ASSERT_TRUE(first.ok()) << first.status();
  std::vector<SampleRequest> reversed(r.rbegin(), r.rend());
  const auto second = gpu.Sample(reversed);
  ASSERT_TRUE(second.ok()) << second.status();
  for (size_t i = 0; i < r.size(); ++i) {
    EXPECT_EQ((*first)[i].token, (*second)[r.size() - 1 - i].token) << i;
    EXPECT_EQ((*first)[i].logprob, (*second)[r.size() - 1 - i].logprob) << i;
  }
}

TEST(CudaSamplerTest, PromptLogprobsMatchCpu) {
  TPSERVE_SKIP_WITHOUT_CUDA();
  for (int64_t vocab : {509, 128256}) {
    const Tensor logits = RandomLogits(40, vocab, 8);
    Gpu gpu(logits, /*max_rows=*/16);
    std::vector<int32_t> next(37);
    for (size_t i = 0; i < next.size(); ++i) next[i] = (i * 7919) % vocab;
    for (int n : {0, 3, 20}) {
      const auto cpu = PromptLogprobs(logits, 2, next, n);
      const auto got = gpu.Prompt(2, next, n);
      ASSERT_TRUE(cpu.ok() && got.ok()) << got.status();
      ASSERT_EQ(got->size(), next.size());
      for (size_t i = 0; i < next.size(); ++i) {
        EXPECT_EQ((*got)[i].token, next[i]);
        ExpectSameLogprobs((*got)[i], (*cpu)[i], (*cpu)[i].logprob);
      }
    }
  }
}

TEST(CudaSamplerTest, ErrorsMatchCpu) {
  TPSERVE_SKIP_WITHOUT_CUDA();
  const int64_t vocab = 600;
  std::vector<float> data = RandomVector(6 * vocab, 9);
  data[1 * vocab + 17] = std::numeric_limits<float>::quiet_NaN();
  data[2 * vocab + 500] = kInf;
  std::fill(data.begin() + 3 * vocab, data.begin() + 4 * vocab, -kInf);
  std::fill(data.begin() + 4 * vocab, data.begin() + 4 * vocab + 300, -kInf);  // allowed
  data[5 * vocab + 9] = 1e37f;
  const Tensor logits({6, vocab}, std::move(data));
  Gpu gpu(logits);
  SamplingParams ok;
  ok.seed = 1;
  SamplingParams overflow = ok;  // 1e37 / 0.01 overflows
  overflow.repetition_penalty = 0.01f;
  const std::vector<int32_t> nine = {9}, bad_token = {600}, negative = {-1};
  SamplingParams bad_top_p = ok, unseeded;
  bad_top_p.top_p = 0;
  const std::vector<std::vector<SampleRequest>> batches = {
      {{0, ok, {}, {}}, {1, ok, {}, {}}},        // NaN
      {{2, ok, {}, {}}},                         // +inf
      {{0, ok, {}, {}}, {4, ok, {}, {}}, {3, ok, {}, {}}},  // all −inf
      {{5, overflow, nine, {}}},
      {{0, ok, bad_token, {}}},
      {{0, ok, {}, {}}, {0, ok, {}, negative}},
      {{6, ok, {}, {}}},  // no such row
      {{0, unseeded, {}, {}}},
      {{0, ok, {}, {}}, {1, bad_top_p, {}, {}}},  // malformed beats the NaN row
      {{4, ok, {}, {}}, {5, ok, nine, nine}},     // fine: −inf entries are allowed
  };
  for (size_t b = 0; b < batches.size(); ++b) {
    const auto cpu = SampleBatch(logits, batches[b]);
    const auto got = gpu.Sample(batches[b]);
    EXPECT_EQ(got.status(), cpu.status()) << "batch " << b;
    if (cpu.ok() && got.ok()) {
      ASSERT_EQ(got->size(), cpu->size());
      for (size_t i = 0; i < cpu->size(); ++i) {
        EXPECT_EQ((*got)[i].token, (*cpu)[i].token) << "batch " << b << " request " << i;
        EXPECT_EQ((*got)[i].status, (*cpu)[i].status) << "batch " << b << " request " << i;
      }
    }
  }
  const std::vector<int32_t> tokens = {1, 2, 3};
  EXPECT_EQ(gpu.Prompt(0, tokens, 0).status(), PromptLogprobs(logits, 0, tokens, 0).status());
  EXPECT_EQ(gpu.Prompt(4, tokens, 0).status(), PromptLogprobs(logits, 4, tokens, 0).status());
  EXPECT_EQ(gpu.Prompt(0, bad_token, 0).status(),
            PromptLogprobs(logits, 0, bad_token, 0).status());
  EXPECT_EQ(gpu.Prompt(0, tokens, 21).status(), PromptLogprobs(logits, 0, tokens, 21).status());
  EXPECT_FALSE(CudaSampler::Create(0, 8, nullptr).ok());
  EXPECT_FALSE(CudaSampler::Create(vocab, 0, nullptr).ok());
}

}  // namespace
}  // namespace tpserve
