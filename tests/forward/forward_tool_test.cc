// The forward tool as a user runs it: real rank processes over Gloo. Golden fixtures
// must reproduce transformers' logits; broken models and arguments must fail with a
// message naming the file and the rule, and a non-zero exit, never a crash or a hang.
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/golden/golden_fixture.h"
#include "worker/layers/test_util.h"
#include "worker/loader/npy.h"
#include "worker/loader/safetensors_writer.h"
#include "worker/tools/synthetic_checkpoint.h"

namespace tpserve {
namespace {

std::string Runfile(const std::string& path) {
  return absl::StrCat(std::getenv("TEST_SRCDIR"), "/tpserve/", path);
}

std::string TmpDir(const std::string& name) {
  const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

struct RunResult {
  int exit_code;
  std::string output;  // stdout + stderr
};

RunResult RunForward(const std::string& args) {
  const std::string cmd = absl::StrCat(Runfile("worker/tools/forward"), " ", args, " 2>&1");
  FILE* pipe = popen(cmd.c_str(), "r");
  RunResult r{-1, ""};
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof(buf), pipe)) r.output.append(buf, n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(ForwardToolTest, ReproducesTransformersLogitsAcrossProcesses) {
  const auto dirs = ListFixtures(Runfile("tests/data/models"));
  ASSERT_FALSE(dirs.empty());
  for (const std::string& dir : dirs) {
    absl::StatusOr<GoldenFixture> g = LoadFixture(dir);
    ASSERT_TRUE(g.ok()) << g.status();
    const int max_tp = g->tp_sizes.back();
    for (auto [tp, incremental] : {std::pair<int, bool>{1, false}, {max_tp, true}}) {
      const std::string out = absl::StrCat(std::getenv("TEST_TMPDIR"), "/out.npy");
      RunResult r = RunForward(absl::StrCat("--model ", dir, " --tp ", tp, " --token-ids ",
                                            absl::StrJoin(g->prompts[0], ","), " --output ", out,
                                            incremental ? " --incremental" : ""));
      ASSERT_EQ(r.exit_code, 0) << r.output;
      absl::StatusOr<Tensor> logits = ReadNpy(out);
      ASSERT_TRUE(logits.ok()) << logits.status();
      EXPECT_LT(RelativeError(*logits, g->logits[0]), 1e-4) << g->name << " tp=" << tp;
    }
  }
}

// --quantization int8 loads the int8 weights the server's `--quantization int8` does: the
// logits stay within the golden test's int8 bound of transformers' and are not the fp32
// path's (the flag reaches the ranks).
TEST(ForwardToolTest, Int8QuantizationStaysWithinItsBound) {
  const auto dirs = ListFixtures(Runfile("tests/data/models"));
  ASSERT_FALSE(dirs.empty());
  absl::StatusOr<GoldenFixture> g = LoadFixture(dirs[0]);
  ASSERT_TRUE(g.ok()) << g.status();
  const int tp = g->tp_sizes.back();
  std::vector<Tensor> logits;
  for (const char* quantization : {"none", "int8"}) {
    const std::string out = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", quantization, ".npy");
    RunResult r = RunForward(absl::StrCat("--model ", dirs[0], " --tp ", tp, " --token-ids ",
                                          absl::StrJoin(g->prompts[0], ","), " --output ", out,
                                          " --quantization ", quantization));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    absl::StatusOr<Tensor> t = ReadNpy(out);
    ASSERT_TRUE(t.ok()) << t.status();
    logits.push_back(*t);
  }
  EXPECT_LT(RelativeError(logits[1], g->logits[0]), 5e-2) << g->name;
  EXPECT_GT(RelativeError(logits[1], logits[0]), 1e-5) << g->name;
}

// A valid two-shard checkpoint to break in one way per test case.
std::string MakeModel(const std::string& name, int shards = 1) {
  const std::string dir = TmpDir(name);
  SyntheticLlama spec;
  spec.num_shards = shards;
  EXPECT_TRUE(WriteSyntheticLlama(dir, spec).ok());
  return dir;
}

void EditConfig(const std::string& dir, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = nlohmann::json::parse(ReadFile(dir + "/config.json"));
  edit(j);
  std::ofstream(dir + "/config.json") << j.dump();
}

// Rewrites model.safetensors' header with `edit` applied, keeping the data bytes.
void EditHeader(const std::string& dir, const std::function<void(nlohmann::json&)>& edit) {
  const std::string bytes = ReadFile(dir + "/model.safetensors");
  uint64_t len = 0;
  for (int i = 0; i < 8; ++i) len |= uint64_t(uint8_t(bytes[i])) << (8 * i);
  nlohmann::json header = nlohmann::json::parse(bytes.substr(8, len));
  edit(header);
  ASSERT_TRUE(WriteBinaryFile(dir + "/model.safetensors",
                              FrameSafetensors(header.dump(), bytes.substr(8 + len)))
                  .ok());
}

struct BadCase {
  std::string name;
  std::function<std::string()> make;  // returns the model dir
  int tp;
  std::vector<std::string> expected;  // substrings of the error
};

class ForwardToolBadInputTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(ForwardToolBadInputTest, FailsWithAPreciseError) {
  const BadCase& c = GetParam();
  const std::string dir = c.make();
  RunResult r = RunForward(absl::StrCat("--model ", dir, " --tp ", c.tp,
                                        " --token-ids 1,2,3 --output ", dir, "/out.npy"));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, -1) << "crashed: " << r.output;
  for (const std::string& s : c.expected) {
    EXPECT_NE(r.output.find(s), std::string::npos) << "missing \"" << s << "\" in:\n" << r.output;
  }
  EXPECT_FALSE(std::ifstream(dir + "/out.npy")) << "no output on failure";
}

std::vector<BadCase> BadCases() {
  return {
      {"TruncatedFile",
       [] {
         const std::string dir = MakeModel("truncated");
         const std::string bytes = ReadFile(dir + "/model.safetensors");
         EXPECT_TRUE(
             WriteBinaryFile(dir + "/model.safetensors", bytes.substr(0, bytes.size() - 100))
                 .ok());
         return dir;
       },
       1, {"model.safetensors"}},
      {"HeaderOverflow",
       [] {
         const std::string dir = MakeModel("overflow");
         std::string bytes = ReadFile(dir + "/model.safetensors");
         bytes[7] = 0x7f;  // header length ≈ 2^63
         EXPECT_TRUE(WriteBinaryFile(dir + "/model.safetensors", bytes).ok());
         return dir;
       },
       1, {"model.safetensors", "header"}},
      {"OverlappingOffsets",
       [] {
         const std::string dir = MakeModel("overlap");
         EditHeader(dir, [](nlohmann::json& h) {
           auto& t = h["model.norm.weight"]["data_offsets"];
           t = {t[0].get<int64_t>() - 4, t[1].get<int64_t>() - 4};
         });
         return dir;
       },
       1, {"model.safetensors"}},
      {"HoleyOffsets",
       [] {
         const std::string dir = MakeModel("holey");
         EditHeader(dir, [](nlohmann::json& h) {
           auto& t = h["model.embed_tokens.weight"]["data_offsets"];
           t = {t[0].get<int64_t>() + 4, t[1].get<int64_t>()};
           h["model.embed_tokens.weight"]["shape"] = {255 * 64 + 63};
         });
         return dir;
       },
       1, {"model.safetensors", "model.embed_tokens.weight"}},
      {"WrongShape",
       [] {
         const std::string dir = MakeModel("wrong_shape");
         EditConfig(dir, [](nlohmann::json& j) { j["intermediate_size"] = 96; });
         return dir;
       },
       1, {"mlp.gate_proj.weight", "[128, 64]", "[96, 64]"}},
      {"MissingTensor",
       [] {
         const std::string dir = MakeModel("missing_tensor");
         EditConfig(dir, [](nlohmann::json& j) { j["num_hidden_layers"] = 3; });
         return dir;
       },
       1, {"model.layers.2."}},
      {"MissingShardFile",
       [] {
         const std::string dir = MakeModel("missing_shard", 2);
         std::remove((dir + "/model-00002-of-00002.safetensors").c_str());
         return dir;
       },
       1, {"model-00002-of-00002.safetensors"}},
      {"TpDoesNotDivideHeads", [] { return MakeModel("tp3"); }, 3,
       {"config.json", "tp=3", "num_attention_heads=4"}},
      {"UnknownArchitecture",
       [] {
         const std::string dir = MakeModel("unknown_arch");
         EditConfig(dir, [](nlohmann::json& j) { j["architectures"] = {"GPT2LMHeadModel"}; });
         return dir;
       },
       1, {"config.json", "GPT2LMHeadModel"}},
      {"MissingModelDir", [] { return absl::StrCat(std::getenv("TEST_TMPDIR"), "/nowhere"); }, 1,
       {"nowhere"}},
  };
}

INSTANTIATE_TEST_SUITE_P(Cases, ForwardToolBadInputTest, ::testing::ValuesIn(BadCases()),
                         [](const auto& info) { return info.param.name; });

TEST(ForwardToolArgsTest, BadArgumentsPointAtHelpAndExit2) {
  const std::string dir = MakeModel("args");
  const std::string out = dir + "/out.npy";
  for (const std::string& args :
       {std::string("--tp 1 --token-ids 1 --output ") + out,
        absl::StrCat("--model ", dir, " --token-ids 1,x --output ", out),
        absl::StrCat("--model ", dir, " --token-ids 1 --output ", out, " --tp 0"),
        absl::StrCat("--model ", dir, " --token-ids 1 --output ", out, " --bogus"),
        absl::StrCat("--model ", dir, " --token-ids 1 --output ", out, " --quantization int4"),
        absl::StrCat("--model ", dir, " --token-ids 1 --output ", out,
                     " --quantization int8 --device cuda")}) {
    RunResult r = RunForward(args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find("run 'forward --help' for the flags"), std::string::npos) << r.output;
  }
  RunResult r = RunForward(absl::StrCat("--model ", dir, " --token-ids 1,256 --output ", out));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("outside the vocab [0, 256)"), std::string::npos) << r.output;
}

// transformers' Mistral has no attention biases whatever attention_bias says; a Llama
// with attention_bias needs them.
TEST(ForwardToolTest, AttentionBiasFollowsTheArchitecture) {
  const std::string dir = MakeModel("mistral_bias");
  EditConfig(dir, [](nlohmann::json& j) {
    j["architectures"] = {"MistralForCausalLM"};
    j["attention_bias"] = true;
    j["sliding_window"] = nullptr;
  });
  RunResult r = RunForward(absl::StrCat("--model ", dir, " --token-ids 1,2 --output ", dir, "/o.npy"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EditConfig(dir, [](nlohmann::json& j) { j["architectures"] = {"LlamaForCausalLM"}; });
  r = RunForward(absl::StrCat("--model ", dir, " --token-ids 1,2 --output ", dir, "/o.npy"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("q_proj.bias"), std::string::npos) << r.output;
}

TEST(ForwardToolTest, SyntheticModelAgreesAcrossTpAndModes) {
  const std::string dir = MakeModel("consistency");
  const std::string ids = "5,17,200,3,99,254,0,1,2,3,4,5,6,7,8,9,10,11,12";  // > one block
  std::vector<Tensor> results;
  for (auto [tp, mode] : {std::pair<int, const char*>{1, ""}, {2, ""}, {2, " --incremental"},
                          {4, " --incremental"}}) {
    const std::string out = absl::StrCat(dir, "/out", tp, mode[0] ? "i" : "", ".npy");
    RunResult r = RunForward(
        absl::StrCat("--model ", dir, " --tp ", tp, " --token-ids ", ids, " --output ", out, mode));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    absl::StatusOr<Tensor> t = ReadNpy(out);
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(t->shape(), (Shape{19, 256}));
    results.push_back(*t);
  }
  for (size_t i = 1; i < results.size(); ++i) EXPECT_LT(RelativeError(results[i], results[0]), 1e-5);
}

}  // namespace
}  // namespace tpserve
