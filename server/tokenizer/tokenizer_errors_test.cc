// Bad input: malformed tokenizer.json files fail at load naming the field;
// invalid UTF-8 and unknown ids fail with InvalidArgument, never a crash. Also what
// the loader lets through: truncation and padding (ignored), and the id bound.
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "server/tokenizer/tokenizer.h"

namespace tpserve {
namespace {

// A tiny valid byte-level tokenizer that each test breaks in one place.
nlohmann::json TinyTokenizer() {
  nlohmann::json vocab = nlohmann::json::object();
  vocab["a"] = 0;
  vocab["b"] = 1;
  vocab["ab"] = 2;
  vocab["Ġ"] = 3;
  return {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens",
       {{{"id", 4}, {"content", "<s>"}, {"special", true}, {"normalized", false}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"a b"}}}},
  };
}

std::string LoadError(const nlohmann::json& json) {
  auto tokenizer = Tokenizer::FromJson(json.dump());
  EXPECT_FALSE(tokenizer.ok());
  return tokenizer.ok() ? "" : std::string(tokenizer.status().message());
}

TEST(TokenizerErrorsTest, TinyTokenizerLoads) {
  auto tokenizer = Tokenizer::FromJson(TinyTokenizer().dump());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ(*(*tokenizer)->Encode("ab<s>a", false), (std::vector<int32_t>{2, 4, 0}));
  EXPECT_EQ(*(*tokenizer)->Decode({2, 4, 0}, true), "aba");
}

TEST(TokenizerErrorsTest, NotJson) {
  EXPECT_NE(Tokenizer::FromJson("{\"model\": ").status().message().find("not valid JSON"),
            absl::string_view::npos);
  EXPECT_FALSE(Tokenizer::FromJson("[]").ok());
}

TEST(TokenizerErrorsTest, ErrorsNameTheField) {
  const std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>> cases = {
      {[](nlohmann::json& j) { j.erase("model"); }, "model: expected an object"},
      {[](nlohmann::json& j) { j["model"]["type"] = "WordPiece"; }, "model.type: 'WordPiece'"},
      {[](nlohmann::json& j) { j["model"]["vocab"]["a"] = "zero"; }, "model.vocab.a:"},
      {[](nlohmann::json& j) { j["model"]["merges"] = {"a b c"}; }, "model.merges[0]:"},
      {[](nlohmann::json& j) { j["model"]["merges"] = {"a x"}; },
       "model: model.merges[0]: token 'x'"},
      {[](nlohmann::json& j) { j["model"]["dropout"] = 0.1; }, "model.dropout:"},
      {[](nlohmann::json& j) { j["model"]["continuing_subword_prefix"] = "##"; },
       "model.continuing_subword_prefix:"},
      {[](nlohmann::json& j) { j["normalizer"] = {{"type", "BertNormalizer"}}; },
       "normalizer.type: 'BertNormalizer' is not supported"},
      {[](nlohmann::json& j) {
         j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}},
                               {"behavior", "Isolated"}};
       },
       "pre_tokenizer.pattern.Regex:"},
      {[](nlohmann::json& j) {
         j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", " "}}},
                               {"behavior", "Sideways"}};
       },
       "pre_tokenizer.behavior:"},
      {[](nlohmann::json& j) {
         j["pre_tokenizer"] = {{"type", "Sequence"},
                               {"pretokenizers", {{{"type", "ByteLevel"}}, {{"type", "Digits"}}}}};
       },
       "pre_tokenizer.pretokenizers[1]: pre-tokenizers after ByteLevel"},
      {[](nlohmann::json& j) { j["decoder"] = {{"type", "WordPiece"}}; },
       "decoder.type: 'WordPiece'"},
      {[](nlohmann::json& j) { j["decoder"] = {{"type", "Strip"}, {"content", "ab"}}; },
       "decoder.content: expected exactly one character"},
      {[](nlohmann::json& j) {
         j["post_processor"] = {{"type", "TemplateProcessing"},
                                {"single", {{{"SpecialToken", {{"id", "<bos>"}}}}}},
                                {"special_tokens", nlohmann::json::object()}};
       },
       "post_processor.single[0].SpecialToken.id: '<bos>' is not in special_tokens"},
      {[](nlohmann::json& j) { j["added_tokens"][0]["id"] = 9; },
       "added_tokens[0].id: '<s>' is listed with id 9 but Hugging Face tokenizers gives it id 4"},
      {[](nlohmann::json& j) { j["added_tokens"][0]["content"] = 5; },
       "added_tokens[0].content: expected a string"},
      {[](nlohmann::json& j) { j["truncation"] = 512; }, "truncation: expected an object"},
      {[](nlohmann::json& j) { j["truncation"] = {{"max_length", -1}}; },
       "truncation.max_length: expected a non-negative integer"},
      {[](nlohmann::json& j) { j["truncation"] = {{"direction", "Up"}}; },
       "truncation.direction: 'Up' is not one of Left, Right"},
      {[](nlohmann::json& j) { j["padding"] = {{"strategy", "Fixed"}}; },
       "padding.strategy: 'Fixed' is not one of BatchLongest"},
      {[](nlohmann::json& j) { j["padding"] = {{"strategy", {{"Fixed", "512"}}}}; },
       "padding.strategy.Fixed: expected an integer"},
      {[](nlohmann::json& j) { j["padding"] = {{"pad_token", 0}}; },
       "padding.pad_token: expected a string"},
  };
  for (const auto& [mutate, expected] : cases) {
    nlohmann::json json = TinyTokenizer();
    mutate(json);
    const std::string message = LoadError(json);
    EXPECT_NE(message.find(expected), std::string::npos)
        << "got: " << message << "\nwant: " << expected;
  }
}

// Shapes as hub files write them (Hugging Face tokenizers 0.23.3's Tokenizer.from_str
// loads a full file holding each); serving ignores them, so encode and decode are unchanged.
TEST(TokenizerErrorsTest, TruncationAndPaddingAreAcceptedAndIgnored) {
  const nlohmann::json truncation = {
      {"direction", "Right"}, {"max_length", 512}, {"strategy", "LongestFirst"}, {"stride", 0}};
  nlohmann::json padding = {{"direction", "Right"}, {"pad_to_multiple_of", nullptr},
                            {"pad_id", 0}, {"pad_type_id", 0}, {"pad_token", "[PAD]"}};
  for (const nlohmann::json& strategy :
       {nlohmann::json{{"Fixed", 512}}, nlohmann::json("BatchLongest")}) {
    padding["strategy"] = strategy;
    nlohmann::json json = TinyTokenizer();
    json["truncation"] = truncation;
    json["padding"] = padding;
    auto tokenizer = Tokenizer::FromJson(json.dump());
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    EXPECT_EQ(*(*tokenizer)->Encode("ab<s>a", true), (std::vector<int32_t>{2, 4, 0}));
    EXPECT_EQ(*(*tokenizer)->Decode({2, 4, 0}, false), "ab<s>a");
  }
}

TEST(TokenizerErrorsTest, InvalidUtf8IsInvalidArgument) {
  auto tokenizer = Tokenizer::FromJson(TinyTokenizer().dump());
  ASSERT_TRUE(tokenizer.ok());
  for (const std::string& bad : std::vector<std::string>{"\xff", "a\xc3", "\xe2\x28\xa1", "\xed\xa0\x80", "\xc0\xaf",
                                std::string("ok\0\xfe", 4)}) {
    auto ids = (*tokenizer)->Encode(bad, true);
    EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

// Hugging Face's decode skips ids its vocabulary lacks; a negative id is no id at all.
TEST(TokenizerErrorsTest, UnknownIdsDecodeToNothingNegativeOnesAreInvalid) {
  auto tokenizer = Tokenizer::FromJson(TinyTokenizer().dump());
  ASSERT_TRUE(tokenizer.ok());
  EXPECT_EQ((*tokenizer)->id_bound(), 5);
  const std::string alone = *(*tokenizer)->Decode({0, 1}, false);
  for (const int32_t id : {5, 6, 1 << 30}) {
    const absl::StatusOr<std::string> text = (*tokenizer)->Decode({0, id, 1}, false);
    ASSERT_TRUE(text.ok()) << id << ": " << text.status();
    EXPECT_EQ(*text, alone) << id;
  }
  EXPECT_EQ((*tokenizer)->Decode({0, -1}, false).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// id_bound() is one past the largest id over the model vocabulary (holes included), the
// added tokens and the post-processor's ids, whichever is largest.
TEST(TokenizerErrorsTest, IdBoundCoversEveryIdTheTokenizerKnows) {
  auto bound = [](const nlohmann::json& json) {
    auto tokenizer = Tokenizer::FromJson(json.dump());
    EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
    return tokenizer.ok() ? (*tokenizer)->id_bound() : -1;
  };
  nlohmann::json json = TinyTokenizer();
  EXPECT_EQ(bound(json), 5);  // <s> = 4 after the model's 0-3
  json["added_tokens"].push_back(
      {{"id", 5}, {"content", "<e>"}, {"special", true}, {"normalized", false}});
  EXPECT_EQ(bound(json), 6);
  json["model"]["vocab"]["Ġ"] = 9;  // a hole at 3, the model's largest id is 9
  json["added_tokens"] = {{{"id", 4}, {"content", "<s>"}, {"special", true}}};
  EXPECT_EQ(bound(json), 10);
  json["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", {{{"SpecialToken", {{"id", "<bos>"}}}}, {{"Sequence", {{"id", "A"}}}}}},
      {"special_tokens", {{"<bos>", {{"id", "<bos>"}, {"ids", {41}}}}}}};
  EXPECT_EQ(bound(json), 42);
}

TEST(TokenizerErrorsTest, MissingFileIsNotFound) {
  EXPECT_EQ(Tokenizer::FromPath("/nonexistent/tokenizer.json").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(TokenizerErrorsTest, ConfigTokensResolve) {
  nlohmann::json config = {{"bos_token", {{"content", "<s>"}}},
                           {"eos_token", "<s>"},
                           {"add_bos_token", true},
                           {"chat_template", "{{ messages }}"}};
  auto tokenizer = Tokenizer::FromJson(TinyTokenizer().dump(), config.dump());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ((*tokenizer)->config().bos_id, 4);
  EXPECT_EQ((*tokenizer)->config().add_bos_token, true);
  EXPECT_EQ((*tokenizer)->config().chat_template, "{{ messages }}");
  config["eos_token"] = "</missing>";
  EXPECT_NE(Tokenizer::FromJson(TinyTokenizer().dump(), config.dump())
                .status()
                .message()
                .find("tokenizer_config.json.eos_token"),
            absl::string_view::npos);
}

}  // namespace
}  // namespace tpserve
