// The model core against Hugging Face transformers: every committed fixture, at every
// tp size its heads allow, ranks as threads, logits within 1e-4 relative error —
// one-shot prefill, token-by-token decode, and a staggered batch that mixes prefill and
// decode of all prompts in the same steps.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/golden/golden_fixture.h"
#include "worker/comm/local_comm_group.h"
#include "worker/layers/test_util.h"
#include "worker/tools/forward_lib.h"

namespace tpserve {
namespace {

constexpr double kMaxRelativeError = 1e-4;

struct Case {
  std::string dir;
  int tp;
  ForwardMode mode;
};

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  const char* mode[] = {"OneShot", "Incremental", "Staggered"};
  std::string dir = info.param.dir.substr(info.param.dir.rfind('/') + 1);
  return dir + "_tp" + std::to_string(info.param.tp) + "_" + mode[int(info.param.mode)];
}

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  for (const std::string& dir : ListFixtures(FixtureRoot())) {
    absl::StatusOr<GoldenFixture> f = LoadFixture(dir);
    if (!f.ok()) continue;  // FixturesLoad reports it
    for (int tp : f->tp_sizes) {
      for (ForwardMode m : {ForwardMode::kOneShot, ForwardMode::kIncremental, ForwardMode::kStaggered}) {
        cases.push_back({dir, tp, m});
      }
    }
  }
  return cases;
}

TEST(GoldenFixturesTest, FixturesLoad) {
  const auto dirs = ListFixtures(FixtureRoot());
  EXPECT_GE(dirs.size(), 6u) << "fixtures missing under " << FixtureRoot();
  for (const std::string& dir : dirs) {
    absl::StatusOr<GoldenFixture> f = LoadFixture(dir);
    EXPECT_TRUE(f.ok()) << f.status();
  }
}

class ModelGoldenTest : public ::testing::TestWithParam<Case> {};

TEST_P(ModelGoldenTest, LogitsMatchTransformers) {
  const Case c = GetParam();
  absl::StatusOr<GoldenFixture> golden = LoadFixture(c.dir);
  ASSERT_TRUE(golden.ok()) << golden.status();
  absl::StatusOr<ModelFiles> files = OpenModel(c.dir, c.tp);
  ASSERT_TRUE(files.ok()) << files.status();
  // One-shot and incremental run each prompt alone; staggered runs them all together.
  std::vector<Tensor> got;
  for (const auto& group : PromptGroups(*golden, c.mode == ForwardMode::kStaggered)) {
    std::vector<std::vector<Tensor>> per_rank(c.tp);
    RunOnLocalRanks(c.tp, [&](int rank, CommGroup& comm) {
      absl::StatusOr<std::unique_ptr<LlamaModel>> model = LoadModel(*files, &comm);
      ASSERT_TRUE(model.ok()) << model.status();
      auto logits = ForwardSequences(**model, group, c.mode, /*block_size=*/4);
      ASSERT_TRUE(logits.ok()) << logits.status();
      per_rank[rank] = *std::move(logits);
    });
    for (int r = 1; r < c.tp; ++r) {
      for (size_t i = 0; i < per_rank[0].size(); ++i) {
        EXPECT_EQ(RelativeError(per_rank[r][i], per_rank[0][i]), 0.0) << "ranks disagree";
      }
    }
    got.insert(got.end(), per_rank[0].begin(), per_rank[0].end());
  }
  ASSERT_EQ(got.size(), golden->logits.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_LT(RelativeError(got[i], golden->logits[i]), kMaxRelativeError)
        << golden->name << " prompt " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ModelGoldenTest, ::testing::ValuesIn(AllCases()), CaseName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(ModelGoldenTest);

}  // namespace
}  // namespace tpserve
