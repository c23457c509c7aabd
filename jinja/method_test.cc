// Renders compared with Python jinja2 3.1.6 in transformers' chat template
// environment (transformers.utils.chat_template_utils._compile_jinja_template);
// the expected strings were recorded from it.
#include "jinja/render_test_util.h"

namespace tpserve::jinja {
namespace {

std::vector<RenderCase> RecordedCases() {
  return {
      {std::string("{{ '  a  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '  a  '.lstrip() }}|{{ '  a  '.rstrip() }}|{{ 'abc'.rstrip('c') }}", 116),
       std::string("a|a|a  |  a|ab", 14),
       kTestContext},
      {std::string("{{ 'a,b,,c'.split(',') }} {{ ' a  b c '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ '  a b  c '.split(None, 1) }} {{ ' a  b c '.rsplit(None, 1) }}", 173),
       std::string("['a', 'b', '', 'c'] ['a', 'b', 'c'] ['a', 'b c'] ['a,b', 'c'] ['a', 'b  c '] [' a  b', 'c']", 91),
       kTestContext},
      {std::string("{{ s.startswith('He') }} {{ s.endswith('ld') }} {{ s.startswith(('x', 'H')) }} {{ s.endswith('x') }}", 100),
       std::string("True True True False", 20),
       kTestContext},
      {std::string("{{ s.upper() }} {{ s.lower() }} {{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }}", 86),
       std::string("HELLO WORLD hello world Hello World Hello", 41),
       kTestContext},
      {std::string("{{ s.replace('l', 'L') }} {{ s.replace('l', 'L', 2) }} {{ 'ab'.replace('', '-') }}", 82),
       std::string("HeLLo WorLd HeLLo World -a-b-", 29),
       kTestContext},
      {std::string("{{ s.find('o') }} {{ s.rfind('o') }} {{ s.find('z') }} {{ s.index('W') }} {{ s.count('l') }} {{ u.find('w') }}", 110),
       std::string("4 7 -1 6 3 6", 12),
       kTestContext},
      {std::string("{{ ', '.join(['a', 'b']) }} {{ '-'.join('abc') }}", 49),
       std::string("a, b a-b-c", 10),
       kTestContext},
      {std::string("{{ '{} and {}'.format('a', 'b') }} {{ '{0}{1}{0}'.format('x', 'y') }} {{ '{name}!'.format(name='n') }} {{ '{:>5}|{:<4}|{:^5}|{:.2f}'.format('a', 'b', 'c', 3.14159) }}", 166),
       std::string("a and b xyx n!     a|b   |  c  |3.14", 36),
       kTestContext},
      {std::string("{{ 'a\\nb\\r\\nc'.splitlines() }}", 30),
       std::string("['a', 'b', 'c']", 15),
       kTestContext},
      {std::string("{{ '123'.isdigit() }} {{ 'abc'.isalpha() }} {{ '  '.isspace() }} {{ 'a1'.isalnum() }} {{ ''.isdigit() }} {{ 'ABC'.isupper() }} {{ 'abc'.islower() }}", 148),
       std::string("True True True True False True True", 35),
       kTestContext},
      {std::string("{{ d.items() | list }} {{ d.keys() | list }} {{ d.values() | list }} {{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 'dflt') }}", 127),
       std::string("[('a', 1), ('b', 'two')] ['a', 'b'] [1, 'two'] 1 None dflt", 58),
       kTestContext},
      {std::string("{{ x.index(2) }} {{ x.count(1) }}", 33),
       std::string("1 1", 3),
       kTestContext},
      {std::string("{{ m.get('content', '') }}", 26),
       std::string("hi", 2),
       kTestContext},
      {std::string("{% for k, v in nested.items() %}{{ k }}{{ v }}{% endfor %}", 58),
       std::string("k{'j': [10, 20]}", 16),
       kTestContext},
      {std::string("{{ 'ab'.zfill(5) }} {{ 'ab'.ljust(4) }}| {{ 'ab'.rjust(4, '*') }} {{ 'a=b=c'.partition('=') }} {{ 'a=b=c'.rpartition('=') }}", 124),
       std::string("000ab ab  | **ab ('a', '=', 'b=c') ('a=b', '=', 'c')", 52),
       kTestContext},
      {std::string("{{ 'prefix_x'.removeprefix('prefix_') }} {{ 'x.txt'.removesuffix('.txt') }}", 75),
       std::string("x x", 3),
       kTestContext},
      {std::string("{{ s.split(' ')[0] }}", 21),
       std::string("Hello", 5),
       kTestContext},
      {std::string("{{ 'abc'.startswith('b', 1) }}", 30),
       std::string("True", 4),
       kTestContext},
  };
}

class MethodTest : public ::testing::TestWithParam<RenderCase> {};

TEST_P(MethodTest, MatchesJinja2) {
  EXPECT_EQ(RenderForTest(GetParam().source, GetParam().context), GetParam().want);
}

INSTANTIATE_TEST_SUITE_P(Recorded, MethodTest, ::testing::ValuesIn(RecordedCases()));

}  // namespace
}  // namespace tpserve::jinja
