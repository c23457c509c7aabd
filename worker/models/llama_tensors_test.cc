// The checkpoint manifest against every transformers fixture, and the refusals OpenModel
// makes from the headers alone: unexpected, missing, misshapen and integer tensors, and
// configs whose sizes are absurd, which must fail without allocating for them (checked
// in a child process under an address-space limit).
#include "worker/models/llama_tensors.h"

#include <dirent.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gtest/gtest.h"
#include "worker/loader/safetensors_writer.h"
#include "worker/models/model_files.h"

namespace tpserve {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string FixtureRoot() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  return std::string(srcdir ? srcdir : ".") + "/tpserve/tests/data/models";
}

TEST(LlamaTensorsTest, ManifestIsExactlyWhatTransformersSavedForEveryFixture) {
  int fixtures = 0;
  for (const auto& entry : fs::directory_iterator(FixtureRoot())) {
    const std::string dir = entry.path().string();
    if (!fs::exists(dir + "/config.json")) continue;
    ++fixtures;
    absl::StatusOr<ModelConfig> config = LoadModelConfig(dir + "/config.json");
    ASSERT_TRUE(config.ok()) << config.status();
    absl::StatusOr<std::unique_ptr<Checkpoint>> ckpt = Checkpoint::Open(dir);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    std::vector<std::string> want;
    for (const ExpectedTensor& t : LlamaCheckpointTensors(*config)) want.push_back(t.name);
    std::sort(want.begin(), want.end());
    EXPECT_EQ(want, (*ckpt)->TensorNames()) << dir;
    EXPECT_TRUE(CheckCheckpointTensors(*config, **ckpt, dir).ok()) << dir;
  }
  EXPECT_GE(fixtures, 10);
}

// A one-layer Llama small enough to write by hand.
json TinyConfig() {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"hidden_size", 8},
          {"intermediate_size", 16},
          {"vocab_size", 32},
          {"num_hidden_layers", 1},
          {"num_attention_heads", 2},
          {"num_key_value_heads", 1},
          {"max_position_embeddings", 64}};
}

class TinyCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::string(std::getenv("TEST_TMPDIR")) + "/" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::create_directories(dir_);
  }

  // config.json from `config`, model.safetensors with every tensor the manifest lists,
  // then `edit` applied to the tensor list.
  void Write(const json& config,
             const std::function<void(std::vector<SafetensorsTensor>&)>& edit = nullptr) {
    std::ofstream(dir_ + "/config.json") << config.dump();
    std::vector<SafetensorsTensor> tensors;
    for (const ExpectedTensor& t : LlamaCheckpointTensors(*ParseModelConfig(config.dump(), "x"))) {
      tensors.push_back({t.name, DType::kF32, t.shape,
                         F32Bytes(std::vector<float>(NumElements(t.shape), 0.5f))});
    }
    if (edit) edit(tensors);
    ASSERT_TRUE(WriteSafetensors(dir_ + "/model.safetensors", tensors).ok());
  }

  std::string OpenError() {
    absl::StatusOr<ModelFiles> files = OpenModel(dir_, 1);
    return files.ok() ? "" : files.status().ToString();
  }

  std::string dir_;
};

TEST_F(TinyCheckpointTest, MatchingCheckpointOpens) {
  Write(TinyConfig());
  EXPECT_EQ(OpenError(), "");
  // rotary inv_freq buffers, which some checkpoints carry, are left unread.
  Write(TinyConfig(), [](std::vector<SafetensorsTensor>& t) {
    t.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", DType::kF32, {2},
                 F32Bytes({1, 2})});
  });
  EXPECT_EQ(OpenError(), "");
}

// An mlp_bias checkpoint whose config lost the key would be served without its biases.
TEST_F(TinyCheckpointTest, TensorsTheConfigDoesNotAccountForAreRefused) {
  json with_bias = TinyConfig();
  with_bias["mlp_bias"] = true;
  Write(with_bias);
  EXPECT_EQ(OpenError(), "");
  std::ofstream(dir_ + "/config.json") << TinyConfig().dump();  // same tensors, no mlp_bias
  const std::string error = OpenError();
  EXPECT_NE(error.find("3 tensor(s) that config.json does not account for"), std::string::npos)
      << error;
  EXPECT_NE(error.find("model.layers.0.mlp.down_proj.bias"), std::string::npos) << error;
  EXPECT_NE(error.find("mlp_bias"), std::string::npos) << error;
}

TEST_F(TinyCheckpointTest, MissingMisshapenAndIntegerTensorsAreRefusedByName) {
  Write(TinyConfig(), [](std::vector<SafetensorsTensor>& t) {
    t.erase(std::remove_if(t.begin(), t.end(),
                           [](const auto& x) { return x.name == "model.norm.weight"; }),
            t.end());
  });
  EXPECT_NE(OpenError().find("does not have: model.norm.weight"), std::string::npos)
      << OpenError();
  Write(TinyConfig(), [](std::vector<SafetensorsTensor>& t) {
    for (auto& x : t) {
      if (x.name == "model.layers.0.mlp.up_proj.weight") {
        x.shape = {8, 16};
      }
    }
  });
  EXPECT_NE(OpenError().find("model.layers.0.mlp.up_proj.weight"), std::string::npos);
  EXPECT_NE(OpenError().find("has shape [8, 16], but config.json gives [16, 8]"),
            std::string::npos)
      << OpenError();
  Write(TinyConfig(), [](std::vector<SafetensorsTensor>& t) {
    for (auto& x : t) {
      if (x.name == "model.norm.weight") x.dtype = DType::kI32;
    }
  });
  EXPECT_NE(OpenError().find("model.norm.weight"), std::string::npos);
  EXPECT_NE(OpenError().find("has dtype I32"), std::string::npos) << OpenError();
}

// Runs OpenModel in a child limited to `limit_bytes` of address space; its exit code is
// the status code (a child that crashes or hits bad_alloc exits otherwise).
int OpenUnderLimit(const std::string& dir, rlim_t limit_bytes) {
  const pid_t pid = fork();
  if (pid == 0) {
    rlimit limit{limit_bytes, limit_bytes};
    setrlimit(RLIMIT_AS, &limit);
    absl::StatusOr<ModelFiles> files = OpenModel(dir, 1);
    _exit(static_cast<int>(files.status().code()));
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Sizes in range for config.json but absurd for the checkpoint fail from the headers,
// without allocating what they describe: in 1 GiB of address space (a full model of
// these sizes would need terabytes).
TEST_F(TinyCheckpointTest, AbsurdSizesFailBeforeAllocating) {
  Write(TinyConfig());
  const struct {
    const char* key;
    int64_t value;
  } cases[] = {
      {"num_hidden_layers", 100000}, {"vocab_size", 2147483647},  {"hidden_size", 1 << 30},
      {"intermediate_size", 2147483646}, {"num_attention_heads", 1 << 30},
  };
  for (const auto& c : cases) {
    json config = TinyConfig();
    config[c.key] = c.value;
    if (std::string(c.key) == "num_attention_heads") config["num_key_value_heads"] = 1 << 30;
    if (std::string(c.key) == "hidden_size") config["head_dim"] = 4;
    std::ofstream(dir_ + "/config.json", std::ios::trunc) << config.dump();
    EXPECT_EQ(OpenUnderLimit(dir_, rlim_t{1} << 30),
              static_cast<int>(absl::StatusCode::kInvalidArgument))
        << c.key << "=" << c.value;
  }
}

TEST(RankWeightBytesTest, CountsEachRanksShards) {
  const ModelConfig c = *ParseModelConfig(TinyConfig().dump(), "x");
  // embed 32·8, q 8·8, k/v 4·8 each, o 8·8, gate/up 16·8 each, down 8·16, three norms 8.
  const int64_t all = 256 + 64 + 64 + 64 + 256 + 128 + 24 + 256;  // lm_head untied: 256
  EXPECT_EQ(RankWeightBytes(c, 1, 4), all * 4);
  // tp 2: everything but the norms halves, except k/v (1 kv head, replicated).
  const int64_t half = (256 + 64 + 64 + 256 + 128 + 256) / 2 + 64 + 24;
  EXPECT_EQ(RankWeightBytes(c, 2, 2), half * 2);
  const RankWeightValues v = CountRankWeightValues(c, 2);
  EXPECT_EQ(v.embedding, 128);
  EXPECT_EQ(v.lm_head, 128);
  EXPECT_EQ(v.linear, (64 + 64 + 256 + 128) / 2 + 64);  // one layer: q, o, gate/up, down; k/v
  EXPECT_EQ(v.layer_linear, v.linear);
  EXPECT_EQ(v.other, 24);
  EXPECT_EQ(v.total(), half);
}

}  // namespace
}  // namespace tpserve
