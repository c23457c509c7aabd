// Renders compared with Python jinja2 3.1.6 in transformers' chat template
// environment (transformers.utils.chat_template_utils._compile_jinja_template);
// the expected strings were recorded from it.
#include <limits>

#include "jinja/value_format.h"
#include "jinja/render_test_util.h"

namespace tpserve::jinja {
namespace {

std::vector<RenderCase> RecordedCases() {
  return {
      {std::string("{{ messages }}", 14),
       std::string("[{'role': 'system', 'content': 'You are helpful.'}, {'role': 'user', 'content': \"What's 2+2\?\"}, {'role': 'assistant', 'content': '4', 'tool_calls': [{'type': 'function', 'function': {'name': 'calc', 'arguments': {'expr': '2+2', 'precise': True, 'n': 1.5}}}]}, {'role': 'tool', 'content': '{\"result\": 4}'}, {'role': 'user', 'content': [{'type': 'text', 'text': 'thanks \303\274'}, {'type': 'image'}]}]", 394),
       std::string("{\"messages\": [{\"role\": \"system\", \"content\": \"You are helpful.\"}, {\"role\": \"user\", \"content\": \"What's 2+2\?\"}, {\"role\": \"assistant\", \"content\": \"4\", \"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": \"calc\", \"arguments\": {\"expr\": \"2+2\", \"precise\": true, \"n\": 1.5}}}]}, {\"role\": \"tool\", \"content\": \"{\\\"result\\\": 4}\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"thanks \\u00fc\"}, {\"type\": \"image\"}]}], \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"calc\", \"description\": \"Calculate.\", \"parameters\": {\"type\": \"object\", \"properties\": {\"expr\": {\"type\": \"string\"}}, \"required\": [\"expr\"]}}}], \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}", 678)},
      {std::string("{{ tools[0].function.parameters }}", 34),
       std::string("{'type': 'object', 'properties': {'expr': {'type': 'string'}}, 'required': ['expr']}", 84),
       std::string("{\"messages\": [{\"role\": \"system\", \"content\": \"You are helpful.\"}, {\"role\": \"user\", \"content\": \"What's 2+2\?\"}, {\"role\": \"assistant\", \"content\": \"4\", \"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": \"calc\", \"arguments\": {\"expr\": \"2+2\", \"precise\": true, \"n\": 1.5}}}]}, {\"role\": \"tool\", \"content\": \"{\\\"result\\\": 4}\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"thanks \\u00fc\"}, {\"type\": \"image\"}]}], \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"calc\", \"description\": \"Calculate.\", \"parameters\": {\"type\": \"object\", \"properties\": {\"expr\": {\"type\": \"string\"}}, \"required\": [\"expr\"]}}}], \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}", 678)},
      {std::string("{{ messages[2].tool_calls[0].function.arguments }}", 50),
       std::string("{'expr': '2+2', 'precise': True, 'n': 1.5}", 42),
       std::string("{\"messages\": [{\"role\": \"system\", \"content\": \"You are helpful.\"}, {\"role\": \"user\", \"content\": \"What's 2+2\?\"}, {\"role\": \"assistant\", \"content\": \"4\", \"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": \"calc\", \"arguments\": {\"expr\": \"2+2\", \"precise\": true, \"n\": 1.5}}}]}, {\"role\": \"tool\", \"content\": \"{\\\"result\\\": 4}\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"thanks \\u00fc\"}, {\"type\": \"image\"}]}], \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"calc\", \"description\": \"Calculate.\", \"parameters\": {\"type\": \"object\", \"properties\": {\"expr\": {\"type\": \"string\"}}, \"required\": [\"expr\"]}}}], \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}", 678)},
      {std::string("{{ 'a\\tb\\x00\\x7f\\u200b\\xa0\303\251' }}", 32),
       std::string("a\tb\000\177\342\200\213\302\240\303\251", 12),
       std::string("{\"messages\": [{\"role\": \"system\", \"content\": \"You are helpful.\"}, {\"role\": \"user\", \"content\": \"What's 2+2\?\"}, {\"role\": \"assistant\", \"content\": \"4\", \"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": \"calc\", \"arguments\": {\"expr\": \"2+2\", \"precise\": true, \"n\": 1.5}}}]}, {\"role\": \"tool\", \"content\": \"{\\\"result\\\": 4}\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"thanks \\u00fc\"}, {\"type\": \"image\"}]}], \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"calc\", \"description\": \"Calculate.\", \"parameters\": {\"type\": \"object\", \"properties\": {\"expr\": {\"type\": \"string\"}}, \"required\": [\"expr\"]}}}], \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}", 678)},
      {std::string("{{ ['a\\tb\\x00\\x7f\\u200b\\xa0\303\251'] }}", 34),
       std::string("['a\\tb\\x00\\x7f\\u200b\\xa0\303\251']", 28),
       std::string("{\"messages\": [{\"role\": \"system\", \"content\": \"You are helpful.\"}, {\"role\": \"user\", \"content\": \"What's 2+2\?\"}, {\"role\": \"assistant\", \"content\": \"4\", \"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": \"calc\", \"arguments\": {\"expr\": \"2+2\", \"precise\": true, \"n\": 1.5}}}]}, {\"role\": \"tool\", \"content\": \"{\\\"result\\\": 4}\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"thanks \\u00fc\"}, {\"type\": \"image\"}]}], \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"calc\", \"description\": \"Calculate.\", \"parameters\": {\"type\": \"object\", \"properties\": {\"expr\": {\"type\": \"string\"}}, \"required\": [\"expr\"]}}}], \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}", 678)},
  };
}

class ReprRenderTest : public ::testing::TestWithParam<RenderCase> {};

TEST_P(ReprRenderTest, MatchesJinja2) {
  EXPECT_EQ(RenderForTest(GetParam().source, GetParam().context), GetParam().want);
}

INSTANTIATE_TEST_SUITE_P(Recorded, ReprRenderTest, ::testing::ValuesIn(RecordedCases()));

TEST(PyFloatReprTest, MatchesPythonRepr) {
  const std::pair<double, const char*> cases[] = {
      {0.0, "0.0"},
      {-0.0, "-0.0"},
      {1.0, "1.0"},
      {0.1, "0.1"},
      {0.3333333333333333, "0.3333333333333333"},
      {1e+16, "1e+16"},
      {1000000000000000.0, "1000000000000000.0"},
      {1.2345678901234568e+17, "1.2345678901234568e+17"},
      {0.0001, "0.0001"},
      {1e-05, "1e-05"},
      {1.5e-07, "1.5e-07"},
      {1e+22, "1e+22"},
      {5e-324, "5e-324"},
      {1.7976931348623157e+308, "1.7976931348623157e+308"},
      {100.0, "100.0"},
      {-2.5e-05, "-2.5e-05"},
      {12345.678, "12345.678"},
      {0.30000000000000004, "0.30000000000000004"},
      {9007199254740992.0, "9007199254740992.0"},
      {std::numeric_limits<double>::infinity(), "inf"},
      {-std::numeric_limits<double>::infinity(), "-inf"},
      {std::numeric_limits<double>::quiet_NaN(), "nan"},
  };
  for (const auto& [f, want] : cases) EXPECT_EQ(PyFloatRepr(f), want) << want;
}

TEST(PyStringReprTest, QuotesAndEscapesAsPython) {
  EXPECT_EQ(PyStringRepr(""), "''");
  EXPECT_EQ(PyStringRepr("it's"), "\"it's\"");
  EXPECT_EQ(PyStringRepr("say \"hi\""), "'say \"hi\"'");
  EXPECT_EQ(PyStringRepr("both ' and \""), "'both \\' and \"'");
  EXPECT_EQ(PyStringRepr("back\\slash"), "'back\\\\slash'");
  EXPECT_EQ(PyStringRepr("tab\tnl\ncr\r"), "'tab\\tnl\\ncr\\r'");
  EXPECT_EQ(PyStringRepr(std::string("\x00\x1f\x7f", 3)), "'\\x00\\x1f\\x7f'");
  EXPECT_EQ(PyStringRepr("\xc3\xa9\xe6\x97\xa5\xf0\x9f\x98\x80"), "'\xc3\xa9\xe6\x97\xa5\xf0\x9f\x98\x80'");
  EXPECT_EQ(PyStringRepr("\xe2\x80\x8b"), "'\\u200b'");  // U+200B, a format character
  EXPECT_EQ(PyStringRepr("\xc2\xa0"), "'\\xa0'");
  EXPECT_EQ(PyStringRepr("\xe2\x80\xa8"), "'\\u2028'");
  EXPECT_EQ(PyStringRepr("\xc2\x85"), "'\\x85'");
}

TEST(ValueTest, PrintsAndComparesAsPython) {
  EXPECT_EQ(Value::Bool(true).Str(), "True");
  EXPECT_EQ(Value::None().Str(), "None");
  EXPECT_EQ(Value().Str(), "");
  EXPECT_EQ(Value().Repr(), "Undefined");
  EXPECT_EQ(Value::Tuple({Value::Int(1)}).Str(), "(1,)");
  EXPECT_EQ(Value::List({Value::String("a"), Value::Float(2)}).Str(), "['a', 2.0]");
  EXPECT_TRUE(PyEquals(Value::Int(1), Value::Float(1.0)));
  EXPECT_TRUE(PyEquals(Value::Int(1), Value::Bool(true)));
  EXPECT_FALSE(PyEquals(Value::List({}), Value::Tuple({})));
  EXPECT_FALSE(Value::String("").Truthy());
  EXPECT_TRUE(Value::Float(0.5).Truthy());
}

}  // namespace
}  // namespace tpserve::jinja
