// RankExecutor against Hugging Face: greedy generation driven purely through StepPlans
// (ranks as threads) must reproduce transformers' greedy ids and logprobs on every
// committed fixture at tp 1 and 2; batching, staggered joins, chunked prefill and
// preemption must not change any sequence's result; prompt logprobs must match the
// recorded logits; malformed plans are rejected with a Status.
#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/golden/golden_fixture.h"
#include "tests/golden/plan_driver.h"
#include "worker/rank/local_rank_group.h"

namespace tpserve {
namespace {

constexpr double kLogprobTolerance = 1e-4;
constexpr int kBlockSize = 4;
constexpr int kNumBlocks = 64;

struct Case {
  std::string dir;
  int tp;
};

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  for (const std::string& dir : ListFixtures(FixtureRoot())) {
    for (int tp : {1, 2}) cases.push_back({dir, tp});
  }
  return cases;
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  return info.param.dir.substr(info.param.dir.rfind('/') + 1) + "_tp" +
         std::to_string(info.param.tp);
}

RankExecutorOptions Options() {
  RankExecutorOptions o;
  o.block_size = kBlockSize;
  o.num_blocks = kNumBlocks;
  return o;
}

StepFn Bind(LocalRankGroup& group) {
  return [&group](const worker::v1::StepPlan& plan) { return group.Execute(plan); };
}

// log_softmax(logits[row])[token]
double LogProb(const Tensor& logits, int64_t row, int32_t token) {
  const float* r = logits.row(row);
  const int64_t v = logits.dim(1);
  double max = r[0], sum = 0;
  for (int64_t i = 1; i < v; ++i) max = std::max<double>(max, r[i]);
  for (int64_t i = 0; i < v; ++i) sum += std::exp(r[i] - max);
  return r[token] - max - std::log(sum);
}

class RankExecutorGoldenTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    absl::StatusOr<GoldenFixture> f = LoadFixture(GetParam().dir);
    ASSERT_TRUE(f.ok()) << f.status();
    golden_ = *std::move(f);
    auto group = LocalRankGroup::Create(GetParam().dir, GetParam().tp, Options());
    ASSERT_TRUE(group.ok()) << group.status();
    group_ = *std::move(group);
  }

  void ExpectGolden(const std::vector<DriverOutput>& out) {
    ASSERT_EQ(out.size(), golden_.greedy.size());
    for (size_t i = 0; i < out.size(); ++i) {
      const GreedyCase& g = golden_.greedy[i];
      EXPECT_EQ(out[i].ids, g.output_ids) << "greedy case " << i;
      ASSERT_EQ(out[i].logprobs.size(), g.output_logprobs.size());
      for (size_t t = 0; t < g.output_logprobs.size(); ++t) {
        EXPECT_NEAR(out[i].logprobs[t], g.output_logprobs[t], kLogprobTolerance)
            << "greedy case " << i << " token " << t;
      }
    }
  }

  GoldenFixture golden_;
  std::unique_ptr<LocalRankGroup> group_;
};

TEST_P(RankExecutorGoldenTest, GreedyAloneMatchesTransformers) {
  std::vector<DriverOutput> out;
  uint64_t steps = 0;
  for (const GreedyCase& g : golden_.greedy) {
    DriverRequest r;
    r.prompt = golden_.prompts[g.prompt_index];
    r.max_new_tokens = static_cast<int>(g.output_ids.size());
    // Each run numbers its plans from 1; the group has seen `steps` plans so far.
    auto renumbered = [&](const worker::v1::StepPlan& plan) {
      worker::v1::StepPlan p = plan;
      p.set_step(++steps);
      return group_->Execute(p);
    };
    auto one = RunGreedy(renumbered, {r}, kBlockSize, kNumBlocks);
    ASSERT_TRUE(one.ok()) << one.status();
    out.push_back((*one)[0]);
  }
  ExpectGolden(out);
}

TEST_P(RankExecutorGoldenTest, BatchedStaggeredChunkedEqualsAlone) {
  std::vector<DriverRequest> reqs;
  for (size_t i = 0; i < golden_.greedy.size(); ++i) {
    const GreedyCase& g = golden_.greedy[i];
    DriverRequest r;
    r.prompt = golden_.prompts[g.prompt_index];
    r.max_new_tokens = static_cast<int>(g.output_ids.size());
    r.join_step = 1 + 2 * static_cast<int>(i);
    r.chunk = 3 + static_cast<int>(i);
    r.prompt_logprobs = i % 2 == 0 ? 2 : -1;
    r.preempt_after = i == 1 ? 3 : 0;
    reqs.push_back(r);
  }
  auto out = RunGreedy(Bind(*group_), reqs, kBlockSize, kNumBlocks);
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectGolden(*out);
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (reqs[i].prompt_logprobs < 0) {
      EXPECT_TRUE((*out)[i].prompt_logprobs.empty());
      continue;
    }
    const int p = golden_.greedy[i].prompt_index;
    const std::vector<int32_t>& prompt = golden_.prompts[p];
    ASSERT_EQ((*out)[i].prompt_logprobs.size(), prompt.size() - 1) << "case " << i;
    for (size_t j = 0; j + 1 < prompt.size(); ++j) {
      EXPECT_NEAR((*out)[i].prompt_logprobs[j], LogProb(golden_.logits[p], j, prompt[j + 1]),
                  kLogprobTolerance)
          << "case " << i << " position " << j;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, RankExecutorGoldenTest, ::testing::ValuesIn(AllCases()),
                         CaseName);

}  // namespace
}  // namespace tpserve
