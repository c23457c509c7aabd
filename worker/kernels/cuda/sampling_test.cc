// The sampling kernels one by one against the CPU sampler, every output between guard
// regions: kernel 1's statistics and top-n, kernel 2's penalised rows bit for bit (and
// the token counts it must leave zero), kernel 3's draws where the CPU's are exact.
// End-to-end comparisons live in worker/sampling/cuda_sampler_test.cc. Tagged "gpu"; skips
// when no CUDA device is present.
#include "worker/kernels/cuda/sampling.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/cuda/cuda_test_util.h"
#include "worker/sampling/sampler.h"
#include "worker/sampling/sampling_rules.h"
#include "worker/tensor.h"

namespace tpserve {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// n structs between guard regions, poisoned like GuardedOutput (all bytes 0xFF).
template <typename T>
class GuardedStructs {
  static_assert(sizeof(T) % sizeof(float) == 0, "viewed as floats");

 public:
  explicit GuardedStructs(size_t n) : n_(n), words_(n * sizeof(T) / sizeof(float)) {}
  T* get() const { return reinterpret_cast<T*>(words_.get()); }
  std::vector<T> ToHostCheckingGuards() const {
    const std::vector<float> words = words_.ToHostCheckingGuards();
    std::vector<T> out(n_);
    std::memcpy(out.data(), words.data(), n_ * sizeof(T));
    return out;
  }

 private:
  size_t n_;
  GuardedOutput<float> words_;
};

template <typename T>
DeviceArray<T> Upload(const std::vector<T>& host) {
  return DeviceArray<T>::FromRaw(host);
}

uint32_t Bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof(b));
  return b;
}

TEST(SamplingKernelsTest, LogprobsMatchCpu) {
  TPSERVE_SKIP_WITHOUT_CUDA();
  for (int64_t vocab : {5, 509, 128256}) {
    SCOPED_TRACE("vocab " + std::to_string(vocab));
    const int rows = 8;
    std::vector<float> data = RandomVector(rows * vocab, 21, 3.0f);
    for (int64_t i = 0; i < vocab; ++i) data[2 * vocab + i] = std::round(data[i]);  // ties
    data[3 * vocab + vocab / 2] = -kInf;
    const Tensor logits({rows, vocab}, data);
    const DeviceArray<float> d_logits(data);
    std::vector<SamplingLogprobRow> q(rows);
    for (int i = 0; i < rows; ++i) {
      q[i] = {i, static_cast<int32_t>((i * 131) % vocab), (i * 7) % 21};
    }
    q[5].token = -1;  // leaves token and logprob alone
    const DeviceArray<SamplingLogprobRow> d_q = Upload(q);
    GuardedStructs<SamplingRowStats> stats(rows);
    GuardedStructs<SamplingResult> results(rows);
    TPSERVE_ASSERT_CUDA(LaunchSamplingLogprobs(d_logits.get(), vocab, d_q.get(), rows,
                                               stats.get(), results.get(), nullptr));
    TPSERVE_ASSERT_CUDA(cudaDeviceSynchronize());
    const std::vector<SamplingRowStats> s = stats.ToHostCheckingGuards();
    const std::vector<SamplingResult> r = results.ToHostCheckingGuards();
    for (int i = 0; i < rows; ++i) {
      SCOPED_TRACE("row " + std::to_string(i));
      const float* row = logits.row(i);
      const float* max = std::max_element(row, row + vocab);
      EXPECT_EQ(s[i].max, *max);
      EXPECT_EQ(s[i].argmax, max - row);
      double sum = 0;
      for (int64_t t = 0; t < vocab; ++t) sum += std::exp(double{row[t]} - *max);
      EXPECT_NEAR(s[i].log_norm, *max + std::log(sum), 1e-5);
      EXPECT_EQ(r[i].not_finite, 0);
      EXPECT_EQ(r[i].penalised_overflow, 0);
      EXPECT_EQ(r[i].lost_selection, 0);
      const int32_t token = q[i].token >= 0 ? q[i].token : 0;
      const auto cpu = PromptLogprobs(logits, i, {token}, q[i].top_n);
      ASSERT_TRUE(cpu.ok()) << cpu.status();
      if (q[i].token >= 0) {
        EXPECT_EQ(r[i].token, token);
        EXPECT_NEAR(r[i].logprob, (*cpu)[0].logprob, 1e-5);
      } else {
        EXPECT_EQ(r[i].token, -1) << "written without a token";
      }
      ASSERT_EQ(r[i].top_count, static_cast<int>((*cpu)[0].top.size()));
      for (int j = 0; j < r[i].top_count; ++j) {
        EXPECT_EQ(r[i].top[j].token, (*cpu)[0].top[j].token) << j;
        EXPECT_NEAR(r[i].top[j].logprob, (*cpu)[0].top[j].logprob, 1e-5) << j;
      }
    }
  }
}

TEST(SamplingKernelsTest, NonFiniteRowsAreFlagged) {
  TPSERVE_SKIP_WITHOUT_CUDA();
  const int64_t vocab = 3000;
  std::vector<float> data = RandomVector(4 * vocab, 22);
  data[0 * vocab + 2999] = std::numeric_limits<float>::quiet_NaN();
  data[1 * vocab + 0] = kInf;
  std::fill(data.begin() + 2 * vocab, data.begin() + 3 * vocab, -kInf);
  std::fill(data.begin() + 3 * vocab, data.begin() + 3 * vocab + 2999, -kInf);  // finite
  const DeviceArray<float> d_logits(data);
  std::vector<SamplingLogprobRow> q(4);
  for (int i = 0; i < 4; ++i) q[i] = {i, -1, 20};
  const DeviceArray<SamplingLogprobRow> d_q = Upload(q);
  GuardedStructs<SamplingRowStats> stats(4);
  GuardedStructs<SamplingResult> results(4);
  TPSERVE_ASSERT_CUDA(LaunchSamplingLogprobs(d_logits.get(), vocab, d_q.get(), 4, stats.get(),
                                             results.get(), nullptr));
  TPSERVE_ASSERT_CUDA(cudaDeviceSynchronize());
  const std::vector<SamplingResult> r = results.ToHostCheckingGuards();
  stats.ToHostCheckingGuards();
  EXPECT_EQ(r[0].not_finite, 1);
  EXPECT_EQ(r[1].not_finite, 1);
  EXPECT_EQ(r[2].not_finite, 1);
  EXPECT_EQ(r[3].not_finite, 0);
  EXPECT_EQ(r[3].top_count, 20);
  EXPECT_EQ(r[3].top[0].token, 2999);
  EXPECT_NEAR(r[3].top[0].logprob, 0.0f, 1e-6);
}

// The CPU sampler's steps 1–2, as worker/sampling/sampler.cc applies them.
std::vector<float> PenalisedRow(const float* raw, int64_t vocab, const SamplingParams& p,
                                const std::vector<int32_t>& prompt,
                                const std::vector<int32_t>& output) {
  std::vector<float> l(raw, raw + vocab);
  if (p.repetition_penalty != 1.0f) {
    std::vector<bool> seen(vocab);
    for (const auto* part : {&prompt, &output}) {
      for (int32_t t : *part) {
        if (!seen[t]) seen[t] = true, l[t] = RepetitionPenalised(l[t], p.repetition_penalty);
      }
    }
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    std::map<int32_t, int32_t> counts;
    for (int32_t t : output) ++counts[t];
    for (auto [t, c] : counts) {
      l[t] -= PresenceFrequencyPenalty(p.presence_penalty, p.frequency_penalty, c);
    }
  }
  return l;
}

TEST(SamplingKernelsTest, PenaltiesAreBitExactAndLeaveCountsZero) {
  TPSERVE_SKIP_WITHOUT_CUDA();
  const int64_t vocab = 70000;
  const int n = 6;
  std::vector<float> data = RandomVector(n * vocab, 23, 3.0f);
  data[5 * vocab + 77] = 300.0f;  // request 5 overflows it
  const DeviceArray<float> d_logits(data);
  std::vector<SamplingParams> p(n);
  p[0].repetition_penalty = 1.7f;
  p[1].presence_penalty = 0.7f, p[1].frequency_penalty = -0.3f;
  p[2].repetition_penalty = 0.6f, p[2].presence_penalty = -2.0f, p[2].frequency_penalty = 2.0f;
  // p[3]: none, so kernel 2 must not touch its scratch row.
  p[4].frequency_penalty = 1.1f;
  p[5].repetition_penalty = 1e-37f;
  std::vector<std::vector<int32_t>> prompt(n), output(n);
  std::mt19937 gen(5);
  std::uniform_int_distribution<int32_t> id(0, 200);
  std::vector<int32_t> history;
  std::vector<SamplingDrawParams> d(n);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < 50; ++j) prompt[i].push_back(id(gen));
    for (int j = 0; j < 3000; ++j) output[i].push_back(id(gen) % (40 + 30 * i));
  }
  prompt[5] = {77};
  for (int i = 0; i < n; ++i) {
    d[i].row = i;
    d[i].penalised = HasPenalties(p[i]);
    d[i].repetition_penalty = p[i].repetition_penalty;
    d[i].presence_penalty = p[i].presence_penalty;
    d[i].frequency_penalty = p[i].frequency_penalty;
    d[i].history_begin = history.size();
    history.insert(history.end(), prompt[i].begin(), prompt[i].end());
    d[i].output_begin = history.size();
    history.insert(history.end(), output[i].begin(), output[i].end());
    d[i].history_end = history.size();
  }
  const DeviceArray<SamplingDrawParams> d_params = Upload(d);
  const DeviceArray<int32_t> d_history = Upload(history);
  DeviceArray<int32_t> counts = Upload(std::vector<int32_t>(n * vocab, 0));
  GuardedOutput<float> penalised(n * vocab);
  GuardedStructs<SamplingRowStats> stats(n);
  GuardedStructs<SamplingResult> results(n);
  TPSERVE_ASSERT_CUDA(LaunchSamplingPenalties(d_logits.get(), vocab, d_params.get(), n,
                                              d_history.get(), penalised.get(), counts.get(),
                                              stats.get(), results.get(), nullptr));
  TPSERVE_ASSERT_CUDA(cudaDeviceSynchronize());
  const std::vector<float> got = penalised.ToHostCheckingGuards();
  const std::vector<SamplingRowStats> s = stats.ToHostCheckingGuards();
  const std::vector<SamplingResult> r = results.ToHostCheckingGuards();
  std::vector<int32_t> left(n * vocab);
  TPSERVE_ASSERT_CUDA(cudaMemcpy(left.data(), counts.get(), left.size() * sizeof(int32_t),
                                 cudaMemcpyDeviceToHost));
  EXPECT_EQ(std::count(left.begin(), left.end(), 0), n * vocab) << "counts left non-zero";
  for (int i = 0; i < n; ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    const float* row = got.data() + i * vocab;
    if (!d[i].penalised) {
      EXPECT_EQ(std::count_if(row, row + vocab, [](float x) { return Bits(x) != ~0u; }), 0);
      continue;
    }
    const std::vector<float> want =
        PenalisedRow(data.data() + i * vocab, vocab, p[i], prompt[i], output[i]);
    int differ = 0;
    for (int64_t t = 0; t < vocab; ++t) differ += Bits(row[t]) != Bits(want[t]);
    EXPECT_EQ(differ, 0);
    const auto max = std::max_element(want.begin(), want.end());
    EXPECT_EQ(s[i].penalised_max, *max);
    EXPECT_EQ(s[i].penalised_argmax, max - want.begin());
    EXPECT_EQ(r[i].penalised_overflow, i == 5 ? 1 : 0);
  }
}

// All three kernels in order, as CudaSampler runs them.
std::vector<SamplingResult> RunAll(const DeviceArray<float>& logits, int64_t vocab,
                                   const std::vector<SamplingDrawParams>& d,
                                   const std::vector<SamplingLogprobRow>& q) {
  const int n = d.size();
  const DeviceArray<SamplingDrawParams> d_params = Upload(d);
  const DeviceArray<SamplingLogprobRow> d_q = Upload(q);
  DeviceArray<int32_t> counts = Upload(std::vector<int32_t>(n * vocab, 0));
  DeviceArray<float> penalised(n * vocab);
  GuardedStructs<SamplingRowStats> stats(n);
  GuardedStructs<SamplingResult> results(n);
  EXPECT_EQ(LaunchSamplingLogprobs(logits.get(), vocab, d_q.get(), n, stats.get(),
                                   results.get(), nullptr),
            cudaSuccess);
  EXPECT_EQ(LaunchSamplingPenalties(logits.get(), vocab, d_params.get(), n, nullptr,
                                    penalised.get(), counts.get(), stats.get(), results.get(),
                                    nullptr),
            cudaSuccess);
  EXPECT_EQ(LaunchSamplingDraw(logits.get(), vocab, d_params.get(), n, penalised.get(),
                               stats.get(), results.get(), nullptr),
            cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  stats.ToHostCheckingGuards();
  return results.ToHostCheckingGuards();
}

// Flat rows have weights exactly 1 on both sides, so every cut and draw is exact: the
// tokens must equal the CPU's, through the tie ranking of the selection.
TEST(SamplingKernelsTest, DrawsOnFlatRowsEqualCpu) {
  TPSERVE_SKIP_WITHOUT_CUDA();
  const int64_t vocab = 5003;
  std::vector<float> data(3 * vocab, 0.25f);
  for (int64_t i = 0; i < vocab; ++i) data[vocab + i] = i < 4000 ? -kInf : 2.0f;
  data[2 * vocab + 7] = std::numeric_limits<float>::quiet_NaN();
  const Tensor logits({3, vocab}, data);
  const DeviceArray<float> d_logits(data);
  std::vector<SamplingParams> cases(6);
  cases[1].top_k = 1000;
  cases[2].top_k = 3, cases[2].min_p = 0.5f;
  cases[3].top_p = 0.37f;
  cases[4].top_k = 4999, cases[4].top_p = 0.01f;
  cases[5].temperature = 0;
  for (size_t c = 0; c < cases.size(); ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    std::vector<SampleRequest> requests;
    std::vector<SamplingDrawParams> d;
    std::vector<SamplingLogprobRow> q;
    for (int seed = 0; seed < 100; ++seed) {
      SampleRequest r{seed % 2, cases[c], {}, {}};
      r.params.seed = seed;
      requests.push_back(r);
      SamplingDrawParams x;
      x.row = r.row;
      x.greedy = IsGreedy(r.params);
      x.scale = 1.0f / r.params.temperature;
      x.u = StepUniform(seed, 0);
      x.top_k = r.params.top_k;
      x.top_p = r.params.top_p;
      x.min_p = r.params.min_p;
      d.push_back(x);
      q.push_back({r.row, -1, 0});
    }
    d.push_back(d[0]), d.back().row = 2, q.push_back({2, -1, 0});  // the NaN row
    const auto cpu = SampleBatch(logits, requests);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    const std::vector<SamplingResult> got = RunAll(d_logits, vocab, d, q);
    for (size_t i = 0; i < requests.size(); ++i) {
      EXPECT_EQ(got[i].lost_selection, 0);
      EXPECT_EQ(got[i].token, (*cpu)[i].token) << "request " << i;
      EXPECT_NEAR(got[i].logprob, (*cpu)[i].logprob, 1e-5) << "request " << i;
    }
    EXPECT_EQ(got.back().not_finite, 1);
    EXPECT_EQ(got.back().token, -1) << "a non-finite row is not drawn from";
  }
}

}  // namespace
}  // namespace tpserve
