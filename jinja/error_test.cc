// Errors name the template, line and column; raise_exception's message comes
// verbatim after the place.
#include "gtest/gtest.h"
#include "jinja/render_test_util.h"

namespace tpserve::jinja {
namespace {

struct ErrorCase {
  const char* source;
  const char* want;
};

void PrintTo(const ErrorCase& c, std::ostream* os) { *os << c.source; }

class ErrorTest : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(ErrorTest, NamesThePlace) {
  EXPECT_EQ(RenderForTest(GetParam().source, "{}"), GetParam().want);
}

INSTANTIATE_TEST_SUITE_P(
    Parse, ErrorTest,
    ::testing::Values(
        ErrorCase{"{% for x in y %}\n{% endif %}", "ERR: chat_template:2:4: unexpected 'endif'"},
        ErrorCase{"a\n  {% endfor %}", "ERR: chat_template:2:6: unexpected 'endfor'"},
        ErrorCase{"{% if x %}", "ERR: chat_template:1:11: unexpected end of template, expected "
                                "'elif', 'else' or 'endif'"},
        ErrorCase{"{% foo %}", "ERR: chat_template:1:4: unknown tag 'foo'"},
        ErrorCase{"{% break %}", "ERR: chat_template:1:4: 'break' outside of a loop"},
        ErrorCase{"{{ 1 + }}", "ERR: chat_template:1:8: expected an expression, got 'end of "
                               "print statement'"},
        ErrorCase{"{{ x y }}", "ERR: chat_template:1:6: expected token 'end of print "
                               "statement', got 'y'"},
        ErrorCase{"{{ f( }}", "ERR: chat_template:1:7: unexpected '}', expected ')'"},
        ErrorCase{"{{ a.b. }}", "ERR: chat_template:1:9: expected name or number, got 'end of "
                                "print statement'"},
        ErrorCase{"{% if a %}{% else %}{% elif b %}{% endif %}",
                  "ERR: chat_template:1:24: unexpected 'elif'"},
        ErrorCase{"{{ \"abc }}", "ERR: chat_template:1:4: unexpected char '\"'"},
        ErrorCase{"x\n{# open", "ERR: chat_template:2:1: Missing end of comment tag"}));

INSTANTIATE_TEST_SUITE_P(
    Render, ErrorTest,
    ::testing::Values(
        ErrorCase{"ab\n{{ 1/0 }}", "ERR: chat_template:2:5: division by zero"},
        ErrorCase{"{{ x.y.z }}", "ERR: chat_template:1:5: 'x' is undefined"},
        ErrorCase{"{% set d = {} %}{{ d.a.b }}",
                  "ERR: chat_template:1:23: 'dict object' has no attribute 'a'"},
        ErrorCase{"{{ \"a\" + 1 }}",
                  "ERR: chat_template:1:8: can only concatenate str (not \"int\") to str"},
        ErrorCase{"{{ 1 < \"a\" }}", "ERR: chat_template:1:4: '<' not supported between "
                                     "instances of 'int' and 'str'"},
        ErrorCase{"{% for i in 5 %}{% endfor %}", "ERR: chat_template:1:13: 'int' object is not "
                                                  "iterable"},
        ErrorCase{"{% set a, b = [1] %}", "ERR: chat_template:1:4: not enough values to unpack "
                                          "(expected 2, got 1)"},
        ErrorCase{"{% macro m() %}{% endmacro %}{{ m(1) }}",
                  "ERR: chat_template:1:34: macro 'm' takes not more than 0 argument(s)"},
        ErrorCase{"{{ 1|nofilter }}", "ERR: chat_template:1:6: No filter named 'nofilter'."},
        ErrorCase{"{{ 1 is notest }}", "ERR: chat_template:1:6: No test named 'notest'."},
        ErrorCase{"{% set x = 1 %}{% set x.a = 2 %}",
                  "ERR: chat_template:1:19: cannot assign attribute on non-namespace object"},
        ErrorCase{"{% set ns = namespace() %}{% set ns._x = 1 %}",
                  "ERR: chat_template:1:30: Chat templates cannot store underscore-prefixed "
                  "attributes on a namespace, but got '_x'. Please rename the attribute."},
        ErrorCase{"{% set ns = namespace() %}{% set ns.a = ns %}",
                  "ERR: chat_template:1:30: a namespace attribute cannot hold a namespace"},
        ErrorCase{"{{ [1]|tojson }}{{ x|tojson }}",
                  "ERR: chat_template:1:22: Object of type Undefined is not JSON serializable"}));

TEST(RaiseExceptionTest, ReturnsTheMessageVerbatimAfterThePlace) {
  EXPECT_EQ(RenderForTest("line one\n  {{- raise_exception('Roles must alternate: ' ~ 3) }}", "{}"),
            "ERR: chat_template:2:22: Roles must alternate: 3");
  EXPECT_EQ(RenderForTest("{% macro m() %}{{ raise_exception('inner') }}{% endmacro %}\n{{ m() }}",
                          "{}"),
            "ERR: chat_template:1:34: inner");
}

TEST(ErrorStatusTest, IsInvalidArgument) {
  absl::StatusOr<Template> t = Template::Parse("{% endif %}", "x");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<Template> ok = Template::Parse("{{ raise_exception('no') }}", "x");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->Render(nlohmann::ordered_json::object()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ok->Render(nlohmann::ordered_json::array()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tpserve::jinja
