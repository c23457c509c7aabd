#include "worker/loader/hf_config.h"

#include <cmath>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/loader/safetensors_writer.h"

namespace tpserve {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using nlohmann::json;

// The shape of a tiny save_pretrained config.json.
json BaseConfig(const std::string& architecture) {
  return {{"architectures", {architecture}},
          {"hidden_size", 64},
          {"intermediate_size", 128},
          {"vocab_size", 1000},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 8},
          {"num_key_value_heads", 2},
          {"rms_norm_eps", 1e-5},
          {"max_position_embeddings", 512}};
}

absl::StatusOr<ModelConfig> Parse(const json& config) {
  return ParseModelConfig(config.dump(), "config.json");
}

std::string ErrorOf(const json& config) {
  auto c = Parse(config);
  return c.ok() ? "" : std::string(c.status().message());
}

TEST(HfConfigTest, ParsesLlamaWithDefaults) {
  auto c = Parse(BaseConfig("LlamaForCausalLM"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->family, ModelFamily::kLlama);
  EXPECT_EQ(c->architecture, "LlamaForCausalLM");
  EXPECT_EQ(c->hidden_size, 64);
  EXPECT_EQ(c->num_key_value_heads, 2);
  EXPECT_EQ(c->head_dim, 8);
  EXPECT_EQ(c->rms_norm_eps, 1e-5);
  EXPECT_EQ(c->rope_theta, 10000.0);
  EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::kNone);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_FALSE(c->attention_bias);
  EXPECT_FALSE(c->qk_norm);
  EXPECT_EQ(c->sliding_window, 0);
  EXPECT_EQ(c->torch_dtype, DType::kF32);
  EXPECT_EQ(c->bos_token_id, -1);
  EXPECT_TRUE(c->eos_token_ids.empty());
}

TEST(HfConfigTest, ParsesOptionalFields) {
  json j = BaseConfig("LlamaForCausalLM");
  j.erase("num_key_value_heads");
  j["head_dim"] = 16;
  j["rope_theta"] = 500000.0;
  j["tie_word_embeddings"] = true;
  j["attention_bias"] = true;
  j["torch_dtype"] = "bfloat16";
  j["bos_token_id"] = 1;
  j["eos_token_id"] = json::array({2, 7});
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->num_key_value_heads, 8);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->rope_theta, 500000.0);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_TRUE(c->attention_bias);
  EXPECT_EQ(c->torch_dtype, DType::kBF16);
  EXPECT_EQ(c->bos_token_id, 1);
  EXPECT_THAT(c->eos_token_ids, ElementsAre(2, 7));

  j["eos_token_id"] = 3;
  j["head_dim"] = nullptr;  // null means derived
  j["dtype"] = "float16";   // the newer key wins
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->eos_token_ids, ElementsAre(3));
  EXPECT_EQ(c->head_dim, 8);
  EXPECT_EQ(c->torch_dtype, DType::kF16);
}

TEST(HfConfigTest, HiddenActAndMlpBias) {
  auto c = Parse(BaseConfig("LlamaForCausalLM"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->hidden_act, Activation::kSilu);
  EXPECT_FALSE(c->mlp_bias);
  const std::pair<const char*, Activation> names[] = {
      {"silu", Activation::kSilu},          {"swish", Activation::kSilu},
      {"gelu", Activation::kGelu},          {"gelu_pytorch_tanh", Activation::kGeluTanh},
      {"gelu_new", Activation::kGeluTanh}, {"relu", Activation::kRelu}};
  for (const auto& [name, act] : names) {
    json j = BaseConfig("Qwen2ForCausalLM");
    j["hidden_act"] = name;
    auto parsed = Parse(j);
    ASSERT_TRUE(parsed.ok()) << name << ": " << parsed.status();
    EXPECT_EQ(parsed->hidden_act, act) << name;
  }
  json j = BaseConfig("LlamaForCausalLM");
  j["mlp_bias"] = true;
  EXPECT_TRUE(Parse(j)->mlp_bias);
  // An activation transformers has but tpserve does not compute is refused, not SiLU.
  j["hidden_act"] = "quick_gelu";
  auto refused = Parse(j);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(refused.status().message()),
              AllOf(HasSubstr("config.json"), HasSubstr("hidden_act"), HasSubstr("quick_gelu")));
  j["hidden_act"] = 3;
  EXPECT_THAT(ErrorOf(j), HasSubstr("hidden_act"));
}

TEST(HfConfigTest, MistralSlidingWindow) {
  json j = BaseConfig("MistralForCausalLM");
  j["sliding_window"] = 256;
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->family, ModelFamily::kMistral);
  EXPECT_EQ(c->sliding_window, 256);
  j["sliding_window"] = nullptr;
  EXPECT_EQ(Parse(j)->sliding_window, 0);
  j.erase("sliding_window");
  EXPECT_EQ(Parse(j)->sliding_window, 4096);  // MistralConfig's default
}

TEST(HfConfigTest, Qwen2HasQkvBiasAndOptionalSlidingWindow) {
  json j = BaseConfig("Qwen2ForCausalLM");
  j["sliding_window"] = 256;
  j["use_sliding_window"] = false;
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->family, ModelFamily::kQwen2);
  EXPECT_TRUE(c->attention_bias);
  EXPECT_FALSE(c->qk_norm);
  EXPECT_EQ(c->sliding_window, 0);
  // transformers slides only layers at or past max_window_layers (default 28): none of 2.
  j["use_sliding_window"] = true;
  EXPECT_EQ(Parse(j)->sliding_window, 0);
  j["max_window_layers"] = 0;
  EXPECT_EQ(Parse(j)->sliding_window, 256);
}

TEST(HfConfigTest, Qwen3HasQkNormAndHeadDim) {
  json j = BaseConfig("Qwen3ForCausalLM");
  j["head_dim"] = 32;  // differs from hidden / heads = 8
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->family, ModelFamily::kQwen3);
  EXPECT_TRUE(c->qk_norm);
  EXPECT_FALSE(c->attention_bias);
  EXPECT_EQ(c->head_dim, 32);
  j.erase("head_dim");
  EXPECT_EQ(Parse(j)->head_dim, 128);  // Qwen3Config's default
  j["head_dim"] = nullptr;
  EXPECT_EQ(Parse(j)->head_dim, 8);
}

TEST(HfConfigTest, RopeScaling) {
  json j = BaseConfig("LlamaForCausalLM");
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::kLinear);
  EXPECT_EQ(c->rope_scaling.factor, 2.0);

  j["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", 8.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_EQ(c->rope_scaling.factor, 8.0);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 8192);

  j["rope_scaling"] = {{"rope_type", "default"}};
  EXPECT_EQ(Parse(j)->rope_scaling.type, RopeScaling::Type::kNone);
  j["rope_scaling"] = nullptr;
  EXPECT_EQ(Parse(j)->rope_scaling.type, RopeScaling::Type::kNone);

  // dynamic is the default rope within max_position_embeddings (transformers rescales
  // only past it, and no served context is longer); its factor is still checked.
  j["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 4.0}};
  EXPECT_EQ(Parse(j)->rope_scaling.type, RopeScaling::Type::kNone);
  j["rope_scaling"] = {{"rope_type", "dynamic"}};
  EXPECT_THAT(ErrorOf(j), HasSubstr("rope_scaling.factor"));
  // A type transformers may add later is refused by name.
  for (const char* type : {"ntk_by_parts"}) {
    j["rope_scaling"] = {{"rope_type", type}, {"factor", 4.0}};
    auto refused = Parse(j);
    EXPECT_TRUE(absl::IsUnimplemented(refused.status())) << type;
    EXPECT_THAT(refused.status().message(),
                AllOf(HasSubstr("config.json"), HasSubstr("rope_scaling"), HasSubstr(type),
                      HasSubstr("not supported")));
  }

  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  EXPECT_THAT(ErrorOf(j), HasSubstr("missing required key \"rope_scaling.low_freq_factor\""));
  j["rope_scaling"] = {{"type", "linear"}};
  EXPECT_THAT(ErrorOf(j), HasSubstr("missing required key \"rope_scaling.factor\""));
}

// yarn as transformers 5 resolves it (the golden fixtures llama_yarn, qwen2_yarn_legacy
// and qwen3_yarn_mscale check the frequencies themselves).
TEST(HfConfigTest, YarnResolvesItsDefaultsAsTransformers) {
  json j = BaseConfig("Qwen2ForCausalLM");  // max_position_embeddings 512
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 128}};
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  const RopeScaling& r = c->rope_scaling;
  EXPECT_EQ(r.type, RopeScaling::Type::kYarn);
  EXPECT_EQ(r.original_max_position_embeddings, 128);
  EXPECT_DOUBLE_EQ(r.attention_factor, 0.1 * std::log(4.0) + 1);
  EXPECT_EQ(r.beta_fast, 32);
  EXPECT_EQ(r.beta_slow, 1);
  EXPECT_TRUE(r.truncate);
  // mscale over mscale_all_dim; an explicit attention_factor wins over both.
  j["rope_scaling"]["mscale"] = 0.707;
  j["rope_scaling"]["mscale_all_dim"] = 1.0;
  EXPECT_DOUBLE_EQ(Parse(j)->rope_scaling.attention_factor,
                   (0.1 * 0.707 * std::log(4.0) + 1) / (0.1 * std::log(4.0) + 1));
  j["rope_scaling"]["attention_factor"] = 1.5;
  EXPECT_EQ(Parse(j)->rope_scaling.attention_factor, 1.5);
  // No factor: max_position_embeddings / original; no original: max_position_embeddings;
  // a top-level original_max_position_embeddings (Phi-3 style) wins.
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", nullptr},
                       {"original_max_position_embeddings", 64}};
  EXPECT_EQ(Parse(j)->rope_scaling.factor, 8.0);
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 2.0}};
  EXPECT_EQ(Parse(j)->rope_scaling.original_max_position_embeddings, 512);
  j["original_max_position_embeddings"] = 256;
  j["rope_scaling"]["original_max_position_embeddings"] = 64;
  EXPECT_EQ(Parse(j)->rope_scaling.original_max_position_embeddings, 256);
  j["rope_scaling"]["beta_fast"] = -1;
  EXPECT_THAT(ErrorOf(j), HasSubstr("beta_fast"));
}

// longrope as transformers resolves it (the golden fixture llama_longrope checks the
// frequencies and which tokens take the long set).
TEST(HfConfigTest, LongRopeResolvesItsDefaultsAsTransformers) {
  json j = BaseConfig("LlamaForCausalLM");  // head_dim 8: 4 factors each, max_position 512
  j["original_max_position_embeddings"] = 128;  // Phi-3 style, top level
  j["rope_scaling"] = {{"type", "longrope"},
                       {"long_factor", {1.0, 2.0, 3.0, 4.0}},
                       {"short_factor", {1.0, 1.0, 1.5, 2.0}}};
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  const RopeScaling& r = c->rope_scaling;
  EXPECT_EQ(r.type, RopeScaling::Type::kLongRope);
  EXPECT_EQ(r.original_max_position_embeddings, 128);
  EXPECT_EQ(r.factor, 4.0);  // 512 / 128
  EXPECT_DOUBLE_EQ(r.attention_factor, std::sqrt(1 + std::log(4.0) / std::log(128.0)));
  EXPECT_EQ(r.long_factor, (std::vector<double>{1, 2, 3, 4}));
  j["rope_scaling"]["attention_factor"] = 1.25;
  EXPECT_EQ(Parse(j)->rope_scaling.attention_factor, 1.25);
  j["rope_scaling"]["short_factor"] = {1.0, 1.0};
  EXPECT_THAT(ErrorOf(j), HasSubstr("short_factor has 2 entries, head_dim / 2 is 4"));
  j["rope_scaling"]["short_factor"] = {1.0, 1.0, 0.0, 2.0};
  EXPECT_THAT(ErrorOf(j), HasSubstr("not a positive number"));
}

TEST(HfConfigTest, RopeParametersFromNewerTransformers) {
  json j = BaseConfig("LlamaForCausalLM");
  j["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 4.0}, {"rope_theta", 1e6}};
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_theta, 1e6);
  EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::kLinear);
}

TEST(HfConfigTest, RejectsUnknownArchitectureAndMissingKeys) {
  EXPECT_THAT(ErrorOf(BaseConfig("GPT2LMHeadModel")),
              AllOf(HasSubstr("config.json"), HasSubstr("\"architectures\""),
                    HasSubstr("unsupported architecture \"GPT2LMHeadModel\"")));
  json j = BaseConfig("LlamaForCausalLM");
  j.erase("architectures");
  EXPECT_THAT(ErrorOf(j), HasSubstr("config.json: missing required key \"architectures\""));
  for (const char* key : {"hidden_size", "intermediate_size", "vocab_size", "num_hidden_layers",
                          "num_attention_heads"}) {
    json k = BaseConfig("LlamaForCausalLM");
    k.erase(key);
    EXPECT_EQ(ErrorOf(k), absl::StrCat("config.json: missing required key \"", key, "\""));
  }
}

TEST(HfConfigTest, RejectsWrongTypes) {
  const std::pair<const char*, json> cases[] = {
      {"hidden_size", "64"},        {"hidden_size", 64.5},
      {"hidden_size", 1e12},        {"num_key_value_heads", true},
      {"rms_norm_eps", "small"},    {"tie_word_embeddings", 1},
      {"torch_dtype", "int8"},      {"eos_token_id", "2"},
      {"eos_token_id", json::array({1, "x"})},
      {"architectures", "LlamaForCausalLM"},
      {"rope_scaling", "linear"},   {"hidden_size", 4294967296ull},
  };
  for (const auto& [key, value] : cases) {
    json j = BaseConfig("LlamaForCausalLM");
    j[key] = value;
    EXPECT_THAT(ErrorOf(j), AllOf(HasSubstr("config.json"), HasSubstr(absl::StrCat("\"", key))))
        << key << "=" << value.dump();
  }
  EXPECT_THAT(std::string(ParseModelConfig("{oops", "config.json").status().message()),
              AllOf(HasSubstr("config.json"), HasSubstr("not valid JSON")));
  EXPECT_THAT(std::string(ParseModelConfig("[]", "config.json").status().message()),
              HasSubstr("expected a JSON object"));
}

TEST(HfConfigTest, ValidateRejectsInconsistentSizes) {
  json j = BaseConfig("LlamaForCausalLM");
  j["num_key_value_heads"] = 3;
  EXPECT_THAT(ErrorOf(j), AllOf(HasSubstr("config.json"),
                                HasSubstr("num_key_value_heads=3 does not divide num_attention_heads=8")));
  j = BaseConfig("LlamaForCausalLM");
  j["hidden_size"] = 0;
  EXPECT_THAT(ErrorOf(j), HasSubstr("hidden_size=0 must be positive"));
  j = BaseConfig("LlamaForCausalLM");
  j["vocab_size"] = -5;
  EXPECT_THAT(ErrorOf(j), HasSubstr("vocab_size=-5 must be positive"));
  j = BaseConfig("LlamaForCausalLM");
  j["rms_norm_eps"] = 0;
  EXPECT_THAT(ErrorOf(j), HasSubstr("rms_norm_eps=0 must be positive"));
}

TEST(HfConfigTest, ValidateTp) {
  ModelConfig c = *Parse(BaseConfig("LlamaForCausalLM"));  // 8 heads, 2 kv heads, ffn 128
  for (int tp : {1, 2, 4, 8}) EXPECT_TRUE(c.ValidateTp(tp).ok()) << tp;
  EXPECT_EQ(c.ValidateTp(0).message(), "tp=0 must be >= 1");
  EXPECT_EQ(c.ValidateTp(3).message(), "tp=3 does not divide num_attention_heads=8");
  c.num_attention_heads = 12;
  c.num_key_value_heads = 4;
  EXPECT_THAT(std::string(c.ValidateTp(6).message()),
              HasSubstr("tp=6 is not a multiple of num_key_value_heads=4"));
  c.num_attention_heads = 16;
  c.num_key_value_heads = 6;
  EXPECT_EQ(c.ValidateTp(4).message(), "tp=4 does not divide num_key_value_heads=6");
  c.num_attention_heads = 8;
  c.num_key_value_heads = 8;
  c.intermediate_size = 100;
  EXPECT_EQ(c.ValidateTp(8).message(), "tp=8 does not divide intermediate_size=100");
}

TEST(HfConfigTest, LoadsFromFile) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(tmp ? tmp : "/tmp", "/config.json");
  ASSERT_TRUE(WriteBinaryFile(path, BaseConfig("Qwen3ForCausalLM").dump()).ok());
  auto c = LoadModelConfig(path);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->family, ModelFamily::kQwen3);
  auto missing = LoadModelConfig(path + ".nope");
  EXPECT_TRUE(absl::IsNotFound(missing.status()));
  EXPECT_THAT(missing.status().message(), HasSubstr("config.json.nope"));
}

TEST(HfConfigTest, GenerationConfigEosTokenIds) {
  auto ids = [](const std::string& text) -> absl::StatusOr<std::vector<int>> {
    absl::StatusOr<GenerationConfig> c =
        ParseGenerationConfig(text, "generation_config.json", /*vocab_size=*/200000);
    if (!c.ok()) return c.status();
    return c->eos_token_ids;
  };
  EXPECT_EQ(*ids(R"({"eos_token_id": 7})"), std::vector<int>({7}));
  EXPECT_EQ(*ids(R"({"eos_token_id": [128001, 128008, 128009]})"),
            std::vector<int>({128001, 128008, 128009}));
  EXPECT_TRUE(ids(R"({"bos_token_id": 1})")->empty());
  EXPECT_TRUE(ids(R"({"eos_token_id": null})")->empty());
  for (const char* bad : {R"({"eos_token_id": "2"})", R"({"eos_token_id": [1, "2"]})",
                          R"({"eos_token_id": -1})", R"({"eos_token_id": [-3]})"}) {
    const absl::StatusOr<std::vector<int>> got = ids(bad);
    ASSERT_FALSE(got.ok()) << bad;
    EXPECT_TRUE(absl::StrContains(got.status().message(), "generation_config.json"))
        << got.status();
    EXPECT_TRUE(absl::StrContains(got.status().message(), "eos_token_id")) << got.status();
  }
  EXPECT_FALSE(ids("{not json").ok());
  EXPECT_FALSE(ids("[1]").ok());
  // No file: no ids (the model's config.json has the only ones).
  const absl::StatusOr<GenerationConfig> missing =
      LoadGenerationConfig("/nonexistent/generation_config.json", 1000);
  ASSERT_TRUE(missing.ok()) << missing.status();
  EXPECT_TRUE(missing->eos_token_ids.empty());
  EXPECT_EQ(missing->max_new_tokens, 0);
  // An eos id the model cannot produce could never end a generation.
  const auto outside = ParseGenerationConfig(R"({"eos_token_id": [5, 1000]})",
                                             "generation_config.json", 1000);
  EXPECT_THAT(std::string(outside.status().message()),
              AllOf(HasSubstr("generation_config.json"), HasSubstr("eos_token_id"),
                    HasSubstr("1000 is outside the model's vocabulary [0, 1000)")));
}

// max_new_tokens: the length tpserve-cli's generate and chat default to.
TEST(HfConfigTest, GenerationConfigMaxNewTokens) {
  auto parse = [](const std::string& text) {
    return ParseGenerationConfig(text, "generation_config.json", /*vocab_size=*/1000);
  };
  EXPECT_EQ(parse(R"({"max_new_tokens": 512, "eos_token_id": 2})")->max_new_tokens, 512);
  EXPECT_EQ(parse(R"({"max_new_tokens": null})")->max_new_tokens, 0);
  EXPECT_EQ(parse(R"({"max_length": 4096})")->max_new_tokens, 0);  // not a new-token count
  for (const char* bad : {R"({"max_new_tokens": 0})", R"({"max_new_tokens": -5})",
                          R"({"max_new_tokens": 2.5})", R"({"max_new_tokens": "64"})",
                          R"({"max_new_tokens": 4294967296})"}) {
    const absl::StatusOr<GenerationConfig> got = parse(bad);
    ASSERT_FALSE(got.ok()) << bad;
    EXPECT_THAT(std::string(got.status().message()),
                AllOf(HasSubstr("generation_config.json"), HasSubstr("max_new_tokens"),
                      HasSubstr("must be an integer in [1, 2147483647]")))
        << bad;
  }
}

TEST(HfConfigTest, TokenIdsMustBeInsideTheVocabulary) {
  for (const char* key : {"bos_token_id", "pad_token_id", "eos_token_id"}) {
    json j = BaseConfig("LlamaForCausalLM");
    j[key] = 1000;  // vocab_size 1000
    EXPECT_THAT(ErrorOf(j), AllOf(HasSubstr("config.json"), HasSubstr(key),
                                  HasSubstr("outside the vocabulary [0, vocab_size=1000)")))
        << key;
    j[key] = 999;
    EXPECT_TRUE(Parse(j).ok()) << key;
  }
  json j = BaseConfig("LlamaForCausalLM");
  j["eos_token_id"] = {2, 4000};
  EXPECT_THAT(ErrorOf(j), HasSubstr("eos_token_id=4000"));
}

// A key tpserve does not know could change the computation: refused by name, not ignored.
TEST(HfConfigTest, UnknownKeysAndQuantizedCheckpointsAreRefused) {
  json j = BaseConfig("LlamaForCausalLM");
  j["logits_scaling"] = 8.0;  // Granite's, which Llama does not have
  auto refused = Parse(j);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(refused.status().message()),
              AllOf(HasSubstr("config.json"), HasSubstr("logits_scaling"),
                    HasSubstr("docs/config_keys.md")));
  j = BaseConfig("Qwen2ForCausalLM");
  j["quantization_config"] = {{"quant_method", "awq"}, {"bits", 4}};
  refused = Parse(j);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(refused.status().message()),
              AllOf(HasSubstr("quantization_config"), HasSubstr("awq")));
  j = BaseConfig("LlamaForCausalLM");
  j["partial_rotary_factor"] = 0.5;
  EXPECT_THAT(ErrorOf(j), HasSubstr("partial_rotary_factor"));
  j["partial_rotary_factor"] = 1.0;
  EXPECT_TRUE(Parse(j).ok());
  // What save_pretrained writes besides the read keys is known and harmless.
  j = BaseConfig("LlamaForCausalLM");
  for (const char* key : {"attention_dropout", "initializer_range", "model_type",
                          "pretraining_tp", "transformers_version", "use_cache"}) {
    j[key] = 0;
  }
  EXPECT_TRUE(Parse(j).ok()) << Parse(j).status();
}

// Qwen2/Qwen3 as transformers 5: sliding per layer from layer_types, or from
// max_window_layers; one kind for every layer, or refused.
TEST(HfConfigTest, QwenLayerTypes) {
  json j = BaseConfig("Qwen2ForCausalLM");  // 2 layers
  j["use_sliding_window"] = true;
  j["sliding_window"] = 16;
  j["max_window_layers"] = 0;
  EXPECT_EQ(Parse(j)->sliding_window, 16);
  j["max_window_layers"] = 2;  // no layer at or past 2: all full
  EXPECT_EQ(Parse(j)->sliding_window, 0);
  j["max_window_layers"] = 1;  // layer 0 full, layer 1 sliding
  auto mixed = Parse(j);
  EXPECT_EQ(mixed.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(mixed.status().message()),
              AllOf(HasSubstr("max_window_layers"), HasSubstr("1 of 2 layers")));
  j["layer_types"] = {"sliding_attention", "sliding_attention"};  // overrides it
  EXPECT_EQ(Parse(j)->sliding_window, 16);
  j["layer_types"] = {"full_attention", "sliding_attention"};
  EXPECT_EQ(Parse(j).status().code(), absl::StatusCode::kUnimplemented);
  j["layer_types"] = {"full_attention"};
  EXPECT_THAT(ErrorOf(j), HasSubstr("num_hidden_layers is 2"));
  j["layer_types"] = {"full_attention", "chunked_attention"};
  EXPECT_THAT(ErrorOf(j), HasSubstr("chunked_attention"));
  // Without use_sliding_window, "sliding_attention" layers attend in full (the window
  // is null), as transformers does.
  j["use_sliding_window"] = false;
  j["layer_types"] = {"sliding_attention", "full_attention"};
  EXPECT_EQ(Parse(j)->sliding_window, 0);
}

}  // namespace
}  // namespace tpserve
