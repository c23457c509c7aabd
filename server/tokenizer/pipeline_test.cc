// Normalizers, pre-tokenizers and decoders on cases taken from Hugging Face
// tokenizers' own output (pre_tokenize_str / normalize_str / decode).
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "server/tokenizer/decoder.h"
#include "server/tokenizer/normalizer.h"
#include "server/tokenizer/pre_tokenizer.h"

namespace tpserve {
namespace {

std::vector<std::string> Words(const PreTokenizer& pre, const std::string& text) {
  PieceList pieces{text, {{0, text.size(), true}}};
  EXPECT_TRUE(pre.PreTokenize(&pieces).ok());
  std::vector<std::string> words;
  for (const PieceSpan& s : pieces.spans) words.push_back(pieces.text.substr(s.begin, s.end - s.begin));
  return words;
}

TEST(NormalizerTest, UnicodeFormsDecomposeLatin1) {
  EXPECT_EQ(*UnicodeNormalizer(NormalizationForm::kNfd).Normalize("\xc3\xa0"), "a\xcc\x80");
  EXPECT_EQ(*UnicodeNormalizer(NormalizationForm::kNfc).Normalize("a\xcc\x80"), "\xc3\xa0");
  EXPECT_EQ(*UnicodeNormalizer(NormalizationForm::kNfkc).Normalize("x\xc2\xb2"), "x2");
  EXPECT_EQ(*LowercaseNormalizer().Normalize("ÀB"), "àb");
  EXPECT_EQ(*StripNormalizer(true, true).Normalize("\xe3\x80\x80 a \t"), "a");
  EXPECT_EQ(*PrependNormalizer("_").Normalize(""), "");
}

TEST(PreTokenizerTest, SplitContiguousInverted) {
  auto regex = Regex::Compile("[aeiou]");
  ASSERT_TRUE(regex.ok());
  SplitPreTokenizer split(*std::move(regex), SplitBehavior::kContiguous, /*invert=*/true);
  EXPECT_EQ(Words(split, "aaxbeec"), (std::vector<std::string>{"aa", "xb", "ee", "c"}));
}

TEST(PreTokenizerTest, MergedWithNextAndPrevious) {
  auto space = Regex::Compile(" ", /*literal=*/true);
  SplitPreTokenizer next(*std::move(space), SplitBehavior::kMergedWithNext, false);
  EXPECT_EQ(Words(next, "a b  c"), (std::vector<std::string>{"a", " b", " ", " c"}));
  auto punct = Regex::Compile("\\p{P}");
  SplitPreTokenizer prev(*std::move(punct), SplitBehavior::kMergedWithPrevious, false);
  EXPECT_EQ(Words(prev, "hi!! x."), (std::vector<std::string>{"hi!", "!", " x."}));
}

TEST(PreTokenizerTest, MetaspaceFirstOnlyAtOrigin) {
  MetaspacePreTokenizer meta("\xe2\x96\x81", PrependScheme::kFirst, /*split=*/true);
  PieceList pieces{"a b", {{0, 1, true}, {2, 3, false}}};
  ASSERT_TRUE(meta.PreTokenize(&pieces).ok());
  EXPECT_EQ(pieces.text, "\xe2\x96\x81" "ab");
}

TEST(DecoderTest, MetaspaceDropsEveryReplacementInFirstToken) {
  std::vector<std::string> tokens = {"\xe2\x96\x81\xe2\x96\x81" "a", "\xe2\x96\x81" "b"};
  ASSERT_TRUE(MetaspaceDecoder("\xe2\x96\x81", true).DecodeChain(&tokens).ok());
  EXPECT_EQ(tokens, (std::vector<std::string>{"a", " b"}));
}

TEST(DecoderTest, ByteFallbackInvalidRunGivesOneReplacementPerByte) {
  std::vector<std::string> tokens = {"<0xE4>", "<0xBD>", "x", "<0xE4>", "<0xBD>", "<0xA0>"};
  ASSERT_TRUE(ByteFallbackDecoder().DecodeChain(&tokens).ok());
  EXPECT_EQ(tokens, (std::vector<std::string>{"\xef\xbf\xbd", "\xef\xbf\xbd", "x", "你"}));
}

TEST(DecoderTest, StripCountsCharacters) {
  std::vector<std::string> tokens = {"  a  ", " "};
  ASSERT_TRUE(StripDecoder(U' ', 1, 2).DecodeChain(&tokens).ok());
  EXPECT_EQ(tokens, (std::vector<std::string>{" a", ""}));
}

}  // namespace
}  // namespace tpserve
