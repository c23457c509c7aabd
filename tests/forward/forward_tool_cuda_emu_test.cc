// The forward tool with --device cuda as a user runs it, on the CPU emulator: real rank
// processes, rank r on (emulated) device r, NCCL between them, at every tp size each
// fixture allows — the CUDA backend's tensor parallelism, which no single GPU can run.
// Logits must match transformers' within 1e-4 (fp32) and 5e-2 (bf16, against an fp32
// reference), for the longest prompt in one prefill step and token by token (decode
// steps, through CUDA graphs).
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "tests/golden/golden_fixture.h"
#include "worker/layers/test_util.h"
#include "worker/loader/npy.h"

namespace tpserve {
namespace {

std::string Runfile(const std::string& path) {
  return absl::StrCat(std::getenv("TEST_SRCDIR"), "/tpserve/", path);
}

struct Case {
  std::string dir;
  int tp;
  bool bf16;
  bool incremental;
};

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return absl::StrCat(c.dir.substr(c.dir.rfind('/') + 1), "_tp", c.tp, c.bf16 ? "_bf16" : "_fp32",
                      c.incremental ? "_Incremental" : "_OneShot");
}

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  for (const std::string& dir : ListFixtures(Runfile("tests/data/models"))) {
    absl::StatusOr<GoldenFixture> f = LoadFixture(dir);
    if (!f.ok()) continue;  // the CPU golden tests report it
    for (int tp : f->tp_sizes) {
      for (bool bf16 : {false, true}) {
        for (bool incremental : {false, true}) cases.push_back({dir, tp, bf16, incremental});
      }
    }
  }
  return cases;
}

class ForwardToolCudaTest : public ::testing::TestWithParam<Case> {};

TEST_P(ForwardToolCudaTest, ReproducesTransformersLogitsAtEveryTp) {
  const Case& c = GetParam();
  absl::StatusOr<GoldenFixture> golden = LoadFixture(c.dir);
  ASSERT_TRUE(golden.ok()) << golden.status();
  const size_t prompt = golden->prompts.size() - 1;  // the longest
  const std::string out = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", CaseName({c, 0}), ".npy");
  const std::string cmd = absl::StrCat(
      Runfile("worker/tools/forward_emu"), " --device cuda --model ", c.dir, " --tp ", c.tp,
      " --dtype ", c.bf16 ? "bfloat16" : "float32", " --token-ids ",
      absl::StrJoin(golden->prompts[prompt], ","), " --output ", out,
      c.incremental ? " --incremental" : "", " --timeout-s 60 2>&1");
  FILE* pipe = popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof(buf), pipe)) output.append(buf, n);
  const int status = pclose(pipe);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << cmd << "\n" << output;
  // Token by token, the decode steps (batch 1) replay a graph from their second step on,
  // with the NCCL collectives captured in it at tp > 1.
  const int graphs = c.incremental ? 1 : 0;
  EXPECT_NE(output.find(absl::StrCat("decode steps replayed ", graphs, " CUDA graph")),
            std::string::npos)
      << output;
  absl::StatusOr<Tensor> logits = ReadNpy(out);
  ASSERT_TRUE(logits.ok()) << logits.status();
  const double error = RelativeError(*logits, golden->logits[prompt]);
  std::printf("%s: relative error %.3g\n", CaseName({c, 0}).c_str(), error);
  EXPECT_LT(error, c.bf16 ? 5e-2 : 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ForwardToolCudaTest, ::testing::ValuesIn(AllCases()), CaseName);

}  // namespace
}  // namespace tpserve
