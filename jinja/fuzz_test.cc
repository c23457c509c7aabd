// Random bytes and mutated real templates give errors or text, never a crash
// (run under ASan: bazel test --config=asan //jinja:fuzz_test).
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "jinja/render_test_util.h"

namespace tpserve::jinja {
namespace {

constexpr char kChatTemplate[] = R"({%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] | trim %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- set ns = namespace(count=0, last='') %}
{{- bos_token }}
{%- for message in loop_messages if message.content is defined %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('Conversation roles must alternate') }}
    {%- endif %}
    {%- set ns.count = ns.count + 1 %}
    {%- macro render(m, prefix='') -%}{{ prefix ~ m.role|upper }}: {{ m.content|tojson(indent=2) }}{%- endmacro %}
    {{- render(message, prefix='[' ~ loop.index ~ '] ') }}
    {%- if message.tool_calls is defined %}{% for c in message.tool_calls %}{{ c.function.name }}({{ c.function.arguments|items|list }}){% endfor %}{% endif %}
    {{- '\n' if not loop.last else '' }}
{%- endfor %}
{%- if add_generation_prompt %}{{ '<|assistant|>' ~ ns.count }}{% endif %}
{# {{ "%s %d"|format(1, 2) }} #}{% raw %}{{ raw }}{% endraw %}{{ [1, 2, 3][::-1]|join(',') }}
)";

constexpr char kContext[] = R"({"messages": [{"role": "system", "content": " sys "},
  {"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo",
  "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]}],
  "bos_token": "<s>", "add_generation_prompt": true})";

void RenderAnything(const std::string& source) {
  RenderOptions options;
  options.max_steps = 200000;
  options.max_output_bytes = 1 << 16;
  const std::string out = RenderForTest(source, kContext, options);
  EXPECT_LE(out.size(), size_t{1} << 17);
}

TEST(FuzzTest, TheSeedTemplateRenders) {
  const std::string out = RenderForTest(kChatTemplate, kContext);
  EXPECT_EQ(out.rfind("<s>[1] USER: \"hi\"\n[2] ASSISTANT: \"yo\"f([('a', 1)])<|assistant|>2", 0), 0u)
      << out;
}

TEST(FuzzTest, RandomBytes) {
  std::mt19937 rng(1);
  const std::string alphabet = "{}%#-+()[]'\".,:|~=<>!*/ \n\tabcdefxyz019_";
  for (int i = 0; i < 3000; ++i) {
    std::string source(rng() % 64, ' ');
    for (char& c : source) {
      c = rng() % 4 == 0 ? static_cast<char>(rng() % 256) : alphabet[rng() % alphabet.size()];
    }
    RenderAnything(source);
  }
}

TEST(FuzzTest, MutatedTemplates) {
  std::mt19937 rng(2);
  const std::string seed = kChatTemplate;
  const std::string pieces[] = {"{%", "%}", "{{", "}}", "{#", "#}", "(", ")", "[", "]", "{", "}",
                                "'", "\"", "-", "+", "|", "loop", "ns", "endfor", "endif",
                                "else", "not", "is", "in", "**", "~", ".", ",", "\\"};
  for (int i = 0; i < 3000; ++i) {
    std::string source = seed;
    const int edits = 1 + rng() % 4;
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % (source.size() + 1);
      switch (rng() % 3) {
        case 0: source.erase(at, 1 + rng() % 8); break;
        case 1: source.insert(at, pieces[rng() % (sizeof(pieces) / sizeof(pieces[0]))]); break;
        default:
          if (at < source.size()) source[at] = static_cast<char>(rng() % 256);
      }
    }
    RenderAnything(source);
  }
}

std::string Repeat(const std::string& piece, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += piece;
  return out;
}

TEST(FuzzTest, DeepNestingOfEveryKindIsAnError) {
  const int n = 20000;
  const std::string sources[] = {
      "{% for " + Repeat("(", n) + "a" + Repeat(")", n) + " in x %}{% endfor %}",
      "{{ x" + Repeat("|upper", n) + " }}",
      "{{ " + Repeat("not ", n) + "x }}",
      "{{ " + Repeat("{'a': ", n) + "1" + Repeat("}", n) + " }}",
      "{{ " + Repeat("f(", n) + "1" + Repeat(")", n) + " }}",
      "{{ x" + Repeat("[0]", n) + " }}",
      "{{ x" + Repeat(".a", n) + " }}",
      "{{ 1" + Repeat(" if 1 else 1", n) + " }}",
      "{{ 1" + Repeat(" ~ 1", n) + " }}",
      Repeat("{% macro m() %}", n),
      Repeat("{% filter upper %}", n),
      Repeat("{% for i in x %}", n),
      "{% macro m(n) %}" + Repeat("{% if true %}", 90) + "{{ m(n) }}" + Repeat("{% endif %}", 90) +
          "{% endmacro %}{{ m(1) }}",
      "{% macro m() %}{% call m() %}{% endcall %}{{ caller() }}{% endmacro %}{% call m() %}{% endcall %}",
  };
  for (const std::string& source : sources) {
    const std::string out = RenderForTest(source, R"({"x": [[1]]})");
    EXPECT_EQ(out.rfind("ERR: ", 0), 0u) << source.substr(0, 80) << " gave " << out.substr(0, 200);
  }
}

TEST(FuzzTest, FlatChainsAndEscapedCallersRender) {
  std::string chain = "{{ 1";
  for (int i = 0; i < 20000; ++i) chain += " < 2";
  EXPECT_EQ(RenderForTest(chain + " }}"), "False");
  // caller() kept past its call block still sees the scope it was made in.
  EXPECT_EQ(RenderForTest("{% set ns = namespace(f=none) %}{% macro m() %}{% set ns.f = caller %}"
                          "{% endmacro %}{% call m() %}x{% endcall %}{{ ns.f() }}"),
            "x");
}

}  // namespace
}  // namespace tpserve::jinja
