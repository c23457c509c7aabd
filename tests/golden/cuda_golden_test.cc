// The CUDA model against Hugging Face transformers: every committed fixture at tp 1 (one
// GPU), in fp32 (within 1e-4 relative error, as the CPU backend) and bf16 (within 5e-2:
// bf16 weights and activations against an fp32 reference), one-shot, token by token and
// staggered (decode steps through CUDA graphs, padded; once more without). Tagged "gpu"; skips without a device. Prints each case's error so a device
// run records how close bf16 lands.
#include <cstdio>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "rendezvous/store_server.h"
#include "tests/golden/golden_fixture.h"
#include "worker/cuda/cuda_test_util.h"
#include "worker/layers/test_util.h"
#include "worker/rank/cuda_rank.h"
#include "worker/tools/forward_lib.h"

namespace tpserve {
namespace {

struct Case {
  std::string dir;
  DeviceDType dtype;
  ForwardMode mode;
  bool graphs = true;  // decode steps replay CUDA graphs
};

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  const char* mode[] = {"OneShot", "Incremental", "Staggered"};
  std::string dir = info.param.dir.substr(info.param.dir.rfind('/') + 1);
  return dir + "_" + DeviceDTypeName(info.param.dtype) + "_" + mode[int(info.param.mode)] +
         (info.param.graphs ? "" : "_Eager");
}

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  for (const std::string& dir : ListFixtures(FixtureRoot())) {
    for (DeviceDType dtype : {DeviceDType::kFloat32, DeviceDType::kBFloat16}) {
      for (ForwardMode m :
           {ForwardMode::kOneShot, ForwardMode::kIncremental, ForwardMode::kStaggered}) {
        cases.push_back({dir, dtype, m});
      }
    }
    // Decode steps without graphs, to tell a graph bug from a kernel bug.
    cases.push_back({dir, DeviceDType::kFloat32, ForwardMode::kIncremental, false});
  }
  return cases;
}

class CudaGoldenTest : public ::testing::TestWithParam<Case> {};

TEST_P(CudaGoldenTest, LogitsMatchTransformers) {
  TPSERVE_SKIP_WITHOUT_CUDA();
  const Case c = GetParam();
  absl::StatusOr<GoldenFixture> golden = LoadFixture(c.dir);
  ASSERT_TRUE(golden.ok()) << golden.status();
  absl::StatusOr<ModelFiles> files = OpenModel(c.dir, 1);
  ASSERT_TRUE(files.ok()) << files.status();
  absl::StatusOr<std::unique_ptr<StoreServer>> store = StoreServer::Start();
  ASSERT_TRUE(store.ok()) << store.status();
  NcclOptions comm;
  comm.store_port = (*store)->port();
  comm.prefix = "golden/";
  CudaModelOptions options;
  options.dtype = c.dtype;
  options.limits.set_max_batch_tokens(512);
  options.max_logit_rows = 7;  // smaller than the prompts: the head loops over chunks
  options.cuda_graphs = c.graphs;
  absl::StatusOr<CudaRank> rank = LoadCudaRank(*files, comm, options);
  ASSERT_TRUE(rank.ok()) << rank.status();
  std::vector<Tensor> got;
  for (const auto& group : PromptGroups(*golden, c.mode == ForwardMode::kStaggered)) {
    absl::StatusOr<std::vector<Tensor>> logits =
        ForwardSequences(*rank->model, group, c.mode, /*block_size=*/4);
    ASSERT_TRUE(logits.ok()) << logits.status();
    got.insert(got.end(), logits->begin(), logits->end());
    // Decode steps repeat their padded sizes, so the second use of one was captured
    // (a capture that failed would have turned graphs off, and this would be 0).
    if (c.graphs && c.mode != ForwardMode::kOneShot) {
      EXPECT_GT(rank->model->num_decode_graphs(), 0) << "decode steps ran without graphs";
    }
  }
  ASSERT_EQ(got.size(), golden->logits.size());
  const double limit = c.dtype == DeviceDType::kFloat32 ? 1e-4 : 5e-2;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = RelativeError(got[i], golden->logits[i]);
    if (!(err <= worst)) worst = err;  // a NaN error is the worst
    EXPECT_LT(err, limit) << golden->name << " prompt " << i;
  }
  std::printf("%s: worst relative error %.3g\n", CaseName({c, 0}).c_str(), worst);
}

// A served max_context below the model's bounds the steps (and sizes the RoPE table and
// block tables to it): a sequence that fits runs, one token longer is refused by name.
TEST(CudaModelLimitsTest, ServedMaxContextBoundsSteps) {
  TPSERVE_SKIP_WITHOUT_CUDA();
  const std::string dir = ListFixtures(FixtureRoot()).front();
  absl::StatusOr<GoldenFixture> golden = LoadFixture(dir);
  ASSERT_TRUE(golden.ok()) << golden.status();
  absl::StatusOr<ModelFiles> files = OpenModel(dir, 1);
  ASSERT_TRUE(files.ok()) << files.status();
  absl::StatusOr<std::unique_ptr<StoreServer>> store = StoreServer::Start();
  ASSERT_TRUE(store.ok()) << store.status();
  NcclOptions comm;
  comm.store_port = (*store)->port();
  comm.prefix = "limits/";
  const std::vector<int32_t>& prompt = golden->prompts.front();
  ASSERT_GE(prompt.size(), 2u);
  CudaModelOptions options;
  options.limits.set_max_batch_tokens(512);
  options.limits.set_max_context(static_cast<int>(prompt.size()) - 1);
  absl::StatusOr<CudaRank> rank = LoadCudaRank(*files, comm, options);
  ASSERT_TRUE(rank.ok()) << rank.status();
  const std::vector<int32_t> fits(prompt.begin(), prompt.end() - 1);
  for (ForwardMode mode : {ForwardMode::kOneShot, ForwardMode::kIncremental}) {
    EXPECT_TRUE(ForwardSequences(*rank->model, {fits}, mode, /*block_size=*/4).ok());
    const absl::StatusOr<std::vector<Tensor>> too_long =
        ForwardSequences(*rank->model, {prompt}, mode, /*block_size=*/4);
    ASSERT_FALSE(too_long.ok());
    EXPECT_EQ(too_long.status().code(), absl::StatusCode::kInvalidArgument) << too_long.status();
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaGoldenTest, ::testing::ValuesIn(AllCases()), CaseName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CudaGoldenTest);

}  // namespace
}  // namespace tpserve
