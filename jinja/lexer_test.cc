// Renders compared with Python jinja2 3.1.6 in transformers' chat template
// environment (transformers.utils.chat_template_utils._compile_jinja_template);
// the expected strings were recorded from it.
#include "jinja/lexer.h"
#include "jinja/render_test_util.h"

namespace tpserve::jinja {
namespace {

std::vector<RenderCase> RecordedCases() {
  return {
      {std::string("a\n{% if true %}\nb\n{% endif %}\nc", 31),
       std::string("a\nb\nc", 5),
       kTestContext},
      {std::string("  {% if true %}x{% endif %}  \n", 30),
       std::string("x  ", 3),
       kTestContext},
      {std::string("a  {%- if true -%}  b  {%- endif -%}  c", 39),
       std::string("abc", 3),
       kTestContext},
      {std::string("a {{ 1 }} b\n  {{ 2 }}\n", 22),
       std::string("a 1 b\n  2", 9),
       kTestContext},
      {std::string("  {#- c -#}  x", 14),
       std::string("x", 1),
       kTestContext},
      {std::string("  {# comment #}\nx", 17),
       std::string("x", 1),
       kTestContext},
      {std::string("x {# c #} y", 11),
       std::string("x  y", 4),
       kTestContext},
      {std::string("a\n  {%+ if true %}b{% endif %}", 30),
       std::string("a\n  b", 5),
       kTestContext},
      {std::string("{% raw %}{{ x }}{% endraw %}", 28),
       std::string("{{ x }}", 7),
       kTestContext},
      {std::string("  {% raw %}\n{{ x }}\n  {% endraw %}\nz", 36),
       std::string("\n{{ x }}\nz", 10),
       kTestContext},
      {std::string("a\015\nb\015c\n", 7),
       std::string("a\nb\nc", 5),
       kTestContext},
      {std::string("a\n\n", 3),
       std::string("a\n", 2),
       kTestContext},
      {std::string("{{ 'a' }}\n{{ 'b' }}\n", 20),
       std::string("a\nb", 3),
       kTestContext},
      {std::string("{%- for i in x %}\n  {{ i }}\n{%- endfor %}", 41),
       std::string("  1  2  3", 9),
       kTestContext},
      {std::string("{% for i in x -%}\n  {{ i }}\n{% endfor %}", 40),
       std::string("1\n2\n3\n", 6),
       kTestContext},
      {std::string("  {{- 'x' -}}  ", 15),
       std::string("x", 1),
       kTestContext},
      {std::string("{% if true +%}\nx{% endif %}", 27),
       std::string("\nx", 2),
       kTestContext},
      {std::string("{%- raw -%}  a  {%- endraw -%}", 30),
       std::string("a", 1),
       kTestContext},
      {std::string("line1\n    {% set y = 1 %}\nline2", 31),
       std::string("line1\nline2", 11),
       kTestContext},
      {std::string("{{ {'a': {'b': 1}} }}", 21),
       std::string("{'a': {'b': 1}}", 15),
       kTestContext},
      {std::string("a{#\nmulti\nline\n#}b", 18),
       std::string("ab", 2),
       kTestContext},
      {std::string("\t{% if true %}\tx\n\t{% endif %}\ty", 31),
       std::string("\tx\n\ty", 5),
       kTestContext},
  };
}

class LexerRenderTest : public ::testing::TestWithParam<RenderCase> {};

TEST_P(LexerRenderTest, MatchesJinja2) {
  EXPECT_EQ(RenderForTest(GetParam().source, GetParam().context), GetParam().want);
}

INSTANTIATE_TEST_SUITE_P(Recorded, LexerRenderTest, ::testing::ValuesIn(RecordedCases()));

std::vector<LexToken::Type> Types(const std::vector<LexToken>& tokens) {
  std::vector<LexToken::Type> types;
  for (const LexToken& t : tokens) types.push_back(t.type);
  return types;
}

TEST(TokenizeTest, SplitsTextTagsAndExpressionTokens) {
  absl::StatusOr<std::vector<LexToken>> tokens = Tokenize("a{{ x.y(1, 'b') }}", "t");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  using T = LexToken::Type;
  EXPECT_EQ(Types(*tokens),
            (std::vector<T>{T::kData, T::kVariableBegin, T::kName, T::kOperator, T::kName,
                            T::kOperator, T::kInteger, T::kOperator, T::kString, T::kOperator,
                            T::kVariableEnd, T::kEnd}));
  EXPECT_EQ((*tokens)[8].text, "b");
  EXPECT_EQ((*tokens)[8].column, 12);
}

TEST(TokenizeTest, ReadsNumbersAsPythonDoes) {
  absl::StatusOr<std::vector<LexToken>> tokens = Tokenize("{{ 1_000 0x1f 2.5 1e3 7 }}", "t");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ((*tokens)[1].int_value, 1000);
  EXPECT_EQ((*tokens)[2].int_value, 31);
  EXPECT_EQ((*tokens)[3].float_value, 2.5);
  EXPECT_EQ((*tokens)[4].type, LexToken::Type::kFloat);
  EXPECT_EQ((*tokens)[4].float_value, 1000.0);
  EXPECT_EQ((*tokens)[5].int_value, 7);
}

TEST(TokenizeTest, UnescapesStringsAsUnicodeEscape) {
  absl::StatusOr<std::vector<LexToken>> tokens =
      Tokenize(R"({{ 'a\n\t\\\'\x41\u00e9\d' }})", "t");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ((*tokens)[1].text, "a\n\t\\'A\xc3\xa9\\d");
}

TEST(TokenizeTest, KeepsBracketsBalancedBeforeClosingTags) {
  absl::StatusOr<std::vector<LexToken>> tokens = Tokenize("{{ {'a': {'b': 1}} }}", "t");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ(tokens->back().type, LexToken::Type::kEnd);
  EXPECT_EQ((*tokens)[tokens->size() - 2].type, LexToken::Type::kVariableEnd);
}

TEST(TokenizeTest, ReportsUnterminatedPieces) {
  EXPECT_EQ(Tokenize("ab\n {# x", "t").status().message(), "t:2:2: Missing end of comment tag");
  EXPECT_EQ(Tokenize("{% raw %}x", "t").status().message(), "t:1:1: Missing end of raw directive");
  EXPECT_EQ(Tokenize("{{ 'x }}", "t").status().message(), "t:1:4: unexpected char '''");
  EXPECT_EQ(Tokenize("{{ ) }}", "t").status().message(), "t:1:4: unexpected ')'");
  EXPECT_EQ(Tokenize("{{ $ }}", "t").status().message(), "t:1:4: unexpected char '$'");
}

TEST(NormalizeSourceTest, ReadsLineBreaksAndDropsOneTrailingNewline) {
  EXPECT_EQ(NormalizeSource("a\r\nb\rc\n"), "a\nb\nc");
  EXPECT_EQ(NormalizeSource("a\n\n"), "a\n");
  EXPECT_EQ(NormalizeSource(""), "");
}

}  // namespace
}  // namespace tpserve::jinja
