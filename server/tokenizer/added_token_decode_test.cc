// Added tokens in Decode and in the streaming IncrementalDetokenizer, against Hugging
// Face tokenizers 0.23.3 on two tiny tokenizer.json files: a byte-level one whose added
// tokens hold characters outside the byte-level alphabet, and a SentencePiece-style one
// with a normalizer and normalized:true added tokens. The expected strings are
//   tok = tokenizers.Tokenizer.from_str(json.dumps(<the JSON built below>))
//   tok.decode(ids, skip_special_tokens=False), tok.decode(ids, skip_special_tokens=True)
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/utf8.h"
#include "server/tokenizer/incremental_detokenizer.h"
#include "server/tokenizer/tokenizer.h"

namespace tpserve {
namespace {

struct HfDecode {
  std::vector<int32_t> ids;
  std::string decoded;       // skip_special_tokens=False
  std::string decoded_skip;  // skip_special_tokens=True
};

nlohmann::json Added(int32_t id, const std::string& content, bool special, bool normalized) {
  return {{"id", id},          {"content", content}, {"single_word", false},
          {"lstrip", false},   {"rstrip", false},    {"normalized", normalized},
          {"special", special}};
}

// Vocabulary: a, b, ab, space, the bytes of é (C3 A9) and the bytes of → (E2 86 92).
nlohmann::json ByteLevelTokenizer(nlohmann::json added_tokens) {
  const nlohmann::json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false},
                                     {"trim_offsets", true}, {"use_regex", true}};
  nlohmann::json vocab = {{"a", 0}, {"b", 1}, {"ab", 2}, {"Ġ", 3}, {"Ã", 4},
                          {"©", 5}, {"â", 6}, {"Ĩ", 7},  {"Ĵ", 8}};
  return {{"added_tokens", std::move(added_tokens)},
          {"normalizer", nullptr},
          {"pre_tokenizer", byte_level},
          {"post_processor", nullptr},
          {"decoder", byte_level},
          {"model",
           {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array({{"a", "b"}})}}}};
}

// Llama-2 style: "▁" for spaces, prepended, then lowercased; byte fallback.
nlohmann::json NormalizingTokenizer(nlohmann::json added_tokens) {
  const nlohmann::json normalizer = {
      {"type", "Sequence"},
      {"normalizers",
       {{{"type", "Prepend"}, {"prepend", "▁"}},
        {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "▁"}},
        {{"type", "Lowercase"}}}}};
  const nlohmann::json decoder = {
      {"type", "Sequence"},
      {"decoders",
       {{{"type", "Replace"}, {"pattern", {{"String", "▁"}}}, {"content", " "}},
        {{"type", "ByteFallback"}},
        {{"type", "Fuse"}},
        {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  nlohmann::json vocab = {{"<unk>", 0}, {"▁", 1}, {"a", 2}, {"b", 3}, {"▁a", 4}, {"<0x41>", 5}};
  return {{"added_tokens", std::move(added_tokens)},
          {"normalizer", normalizer},
          {"pre_tokenizer", nullptr},
          {"post_processor", nullptr},
          {"decoder", decoder},
          {"model",
           {{"type", "BPE"}, {"unk_token", "<unk>"}, {"fuse_unk", true}, {"byte_fallback", true},
            {"vocab", vocab}, {"merges", nlohmann::json::array({{"▁", "a"}})}}}};
}

std::string Stream(const Tokenizer& tokenizer, const std::vector<int32_t>& ids, bool skip) {
  IncrementalDetokenizer detok(&tokenizer, skip);
  std::string out;
  for (const int32_t id : ids) {
    absl::StatusOr<std::string> chunk = detok.Step(id);
    EXPECT_TRUE(chunk.ok()) << chunk.status();
    if (!chunk.ok()) return out;
    EXPECT_TRUE(ValidateUtf8(*chunk).ok()) << *chunk;
    out += *chunk;
  }
  absl::StatusOr<std::string> rest = detok.Flush();
  EXPECT_TRUE(rest.ok()) << rest.status();
  return rest.ok() ? out + *rest : out;
}

void ExpectDecodesAsHf(const nlohmann::json& json, const std::vector<HfDecode>& cases) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::FromJson(json.dump());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const Tokenizer& tok = **tokenizer;
  for (const HfDecode& c : cases) {
    const std::string ids = nlohmann::json(c.ids).dump();
    EXPECT_EQ(*tok.Decode(c.ids, false), c.decoded) << ids;
    EXPECT_EQ(*tok.Decode(c.ids, true), c.decoded_skip) << ids;
    EXPECT_EQ(Stream(tok, c.ids, false), c.decoded) << "streamed " << ids;
    EXPECT_EQ(Stream(tok, c.ids, true), c.decoded_skip) << "streamed " << ids;
  }
}

// HF's ByteLevel decoder maps a token back to bytes only when every character is in
// the alphabet; any other token ("→", "END✓") passes as its own UTF-8. Both join
// one byte string, so bytes split across tokens still pair up ("xÃ" + "©" is "xé").
TEST(AddedTokenDecodeTest, ByteLevelPassesTokensOutsideTheAlphabetThrough) {
  const nlohmann::json json = ByteLevelTokenizer({
      Added(9, "<s>", true, false), Added(10, "→", false, false),
      Added(11, "END✓", false, true), Added(12, "✓sp", true, false),
      Added(13, "Ġx", false, false), Added(14, "xÃ", false, false),
      Added(15, "<|im✓|>", true, false)});
  ExpectDecodesAsHf(json, {
      {{10}, "→", "→"},
      {{11}, "END✓", "END✓"},
      {{0, 9, 1}, "a<s>b", "ab"},
      {{2, 11, 3, 0}, "abEND✓ a", "abEND✓ a"},
      {{8, 9, 10, 11}, "�<s>→END✓", "�→END✓"},
      {{3, 9, 3}, " <s> ", "  "},
      {{12}, "✓sp", ""},
      {{0, 12, 1}, "a✓spb", "ab"},
      {{13}, " x", " x"},
      {{13, 5}, " x�", " x�"},
      {{4, 9, 5}, "�<s>�", "é"},
      {{6, 7, 14, 8}, "�xÒ", "�xÒ"},
      {{6, 9, 7, 8}, "�<s>��", "→"},
      {{14}, "x�", "x�"},
      {{14, 5}, "xé", "xé"},
      {{14, 15, 14}, "x�<|im✓|>x�", "x�x�"},
      {{10, 8}, "→�", "→�"},
      {{6, 12, 7, 8, 4, 14}, "�✓sp���x�", "→�x�"},
      {{7, 12, 6, 10, 6, 1, 4}, "�✓sp�→�b�", "��→�b�"},
      {{3, 6, 9, 5, 4, 9, 8}, " �<s>��<s>�", " �Ò"},
      {{11, 8, 6, 8, 11, 9}, "END✓��END✓<s>", "END✓��END✓"},
      {{13, 8, 0, 9, 10, 2, 13}, " x�a<s>→ab x", " x�a→ab x"},
      {{12, 1, 12, 13, 8, 14, 9}, "✓spb✓sp x�x�<s>", "b x�x�"},
  });
}

// HF decodes a normalized:true added token from its content after the normalizer
// ("HeLLo World" as "▁hello▁world", so "hello world" once the decoder has run), and
// skips a token only when that form is a special token's content: "[SPEC]" and "ok"
// are special but normalize to "▁[spec]" and "▁ok", so they are never skipped.
TEST(AddedTokenDecodeTest, NormalizedTokensDecodeFromTheirNormalizedForm) {
  const nlohmann::json json = NormalizingTokenizer({
      Added(6, "HeLLo World", false, true), Added(7, "<ctrl>", true, false),
      Added(8, "[SPEC]", true, true), Added(9, "raw Text", false, false),
      Added(10, "ok", true, true), Added(11, "Up", false, true)});
  ExpectDecodesAsHf(json, {
      {{6}, "hello world", "hello world"},
      {{7}, "<ctrl>", ""},
      {{8}, "[spec]", "[spec]"},
      {{9}, "raw Text", "raw Text"},
      {{10}, "ok", "ok"},
      {{11}, "up", "up"},
      {{2, 6, 3}, "a hello worldb", "a hello worldb"},
      {{6, 6}, "hello world hello world", "hello world hello world"},
      {{9, 10}, "raw Text ok", "raw Text ok"},
      {{10, 2}, "oka", "oka"},
      {{4, 7, 4}, "a<ctrl> a", "a a"},
      {{5, 6}, "A hello world", "A hello world"},
      {{7, 8, 3}, "<ctrl> [spec]b", "[spec]b"},
      {{9, 7, 0, 3, 10, 2}, "raw Text<ctrl><unk>b oka", "raw Text<unk>b oka"},
      {{3, 5, 0, 11, 7, 9}, "bA<unk> up<ctrl>raw Text", "bA<unk> upraw Text"},
  });
}

// A content listed twice takes the later entry's flags, but HF keeps it in the special
// set once it was special and keeps its normalized form once it was normalized.
TEST(AddedTokenDecodeTest, RepeatedContentKeepsEarlierSpecialAndNormalized) {
  for (const bool special_first : {true, false}) {
    SCOPED_TRACE(special_first);
    ExpectDecodesAsHf(
        ByteLevelTokenizer({Added(9, "<t>", special_first, false),
                            Added(9, "<t>", !special_first, false)}),
        {{{9}, "<t>", ""}, {{0, 9, 1}, "a<t>b", "ab"}});
  }
  for (const bool normalized_first : {true, false}) {
    SCOPED_TRACE(normalized_first);
    ExpectDecodesAsHf(
        NormalizingTokenizer({Added(6, "XY", !normalized_first, normalized_first),
                              Added(6, "XY", normalized_first, !normalized_first)}),
        {{{6}, "xy", "xy"}, {{2, 6, 3}, "a xyb", "a xyb"}});
  }
}

}  // namespace
}  // namespace tpserve
