// The model core against Hugging Face transformers: every committed fixture, at every
// tp size its heads allow, ranks as threads, logits within 1e-4 relative error —
// one-shot prefill, token-by-token decode, and a staggered batch that mixes prefill and
// decode of all prompts in the same steps — and with the layers' weights in bf16
// (CpuWeights::kBFloat16, over a bf16 KV cache as served) within 5e-2, the CUDA bf16
// path's bound (bf16 weights and bf16-rounded GEMM inputs against an fp32 reference);
// and with int8 weight-only quantization (CpuWeights::kInt8, bf16 KV cache) within
// kMaxInt8RelativeError.
#include <algorithm>
#include <cstdio>
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
constexpr double kMaxBf16RelativeError = 5e-2;
// int8 per output channel rounds each weight by up to scale/2 = max|w_row|/254, several
// times bf16's rounding: the fixtures land at 2.1e-2 at worst (bf16: 9.8e-3 on an AMX
// host, where attention also rounds q and its weights to bf16; 9.5e-3 without), and the
// bound is bf16's.
constexpr double kMaxInt8RelativeError = 5e-2;

const char* WeightsName(CpuWeights w) {
  return w == CpuWeights::kInt8 ? "int8" : w == CpuWeights::kBFloat16 ? "bf16" : "fp32";
}

struct Case {
  std::string dir;
  int tp;
  ForwardMode mode;
  CpuWeights weights = CpuWeights::kFloat32;
};

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  const char* mode[] = {"OneShot", "Incremental", "Staggered"};
  std::string dir = info.param.dir.substr(info.param.dir.rfind('/') + 1);
  return dir + "_tp" + std::to_string(info.param.tp) + "_" + mode[int(info.param.mode)] +
         (info.param.weights == CpuWeights::kFloat32
              ? std::string()
              : std::string("_") + WeightsName(info.param.weights));
}

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  for (const std::string& dir : ListFixtures(FixtureRoot())) {
    absl::StatusOr<GoldenFixture> f = LoadFixture(dir);
    if (!f.ok()) continue;  // FixturesLoad reports it
    for (int tp : f->tp_sizes) {
      for (ForwardMode m : {ForwardMode::kOneShot, ForwardMode::kIncremental, ForwardMode::kStaggered}) {
        cases.push_back({dir, tp, m});
        cases.push_back({dir, tp, m, CpuWeights::kBFloat16});
        cases.push_back({dir, tp, m, CpuWeights::kInt8});
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
      absl::StatusOr<std::unique_ptr<LlamaModel>> model = LoadModel(*files, &comm, c.weights);
      ASSERT_TRUE(model.ok()) << model.status();
      // bf16 mode serves a bf16 KV cache by default (--kv-cache-dtype auto): test that.
      CpuModelRunner runner(model->get(), c.weights == CpuWeights::kFloat32 ? 4 : 2);
      auto logits = ForwardSequences(runner, group, c.mode, /*block_size=*/4);
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
  const double bound = c.weights == CpuWeights::kInt8       ? kMaxInt8RelativeError
                       : c.weights == CpuWeights::kBFloat16 ? kMaxBf16RelativeError
                                                            : kMaxRelativeError;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double error = RelativeError(got[i], golden->logits[i]);
    worst = std::max(worst, error);
    EXPECT_LT(error, bound) << golden->name << " prompt " << i;
  }
  // How close each case lands, for docs/design.md's bf16 bound.
  std::printf("%s tp%d %s: max relative error %.3g\n", golden->name.c_str(), c.tp,
              WeightsName(c.weights), worst);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ModelGoldenTest, ::testing::ValuesIn(AllCases()), CaseName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(ModelGoldenTest);

}  // namespace
}  // namespace tpserve
