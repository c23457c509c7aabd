// Renders compared with Python jinja2 3.1.6 in transformers' chat template
// environment (transformers.utils.chat_template_utils._compile_jinja_template);
// the expected strings were recorded from it.
#include "jinja/render_test_util.h"

namespace tpserve::jinja {
namespace {

std::vector<RenderCase> RecordedCases() {
  return {
      {std::string("{{ x is defined }} {{ zz is defined }} {{ zz is undefined }} {{ n is none }} {{ t is boolean }} {{ t is true }} {{ t is false }}", 128),
       std::string("True False True True True True False", 36),
       kTestContext},
      {std::string("{{ 1 is integer }} {{ 1.0 is integer }} {{ 1.0 is float }} {{ 1 is number }} {{ t is number }} {{ 'a' is string }} {{ d is mapping }} {{ x is mapping }}", 152),
       std::string("True False True True True True True False", 41),
       kTestContext},
      {std::string("{{ x is iterable }} {{ 1 is iterable }} {{ s is iterable }} {{ x is sequence }} {{ d is sequence }} {{ 1 is sequence }} {{ zz is iterable }}", 140),
       std::string("True False True True True False True", 36),
       kTestContext},
      {std::string("{{ range is callable }} {{ 1 is callable }} {{ s.upper is callable }}", 69),
       std::string("True False True", 15),
       kTestContext},
      {std::string("{{ 2 is in x }} {{ 3 is odd }} {{ 3 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ n is sameas none }} {{ t is sameas true }} {{ 1 is not none }} {{ zz is not defined }}", 187),
       std::string("True True False True False True True True True", 46),
       kTestContext},
      {std::string("{{ 'ab' is lower }} {{ 'AB' is upper }} {{ 'Ab' is upper }}", 59),
       std::string("True True False", 15),
       kTestContext},
      {std::string("{% if m.content is string %}s{% endif %}", 40),
       std::string("s", 1),
       kTestContext},
      {std::string("{{ x is not sequence }}", 23),
       std::string("False", 5),
       kTestContext},
  };
}

class PredicateTest : public ::testing::TestWithParam<RenderCase> {};

TEST_P(PredicateTest, MatchesJinja2) {
  EXPECT_EQ(RenderForTest(GetParam().source, GetParam().context), GetParam().want);
}

INSTANTIATE_TEST_SUITE_P(Recorded, PredicateTest, ::testing::ValuesIn(RecordedCases()));

}  // namespace
}  // namespace tpserve::jinja
