// Budgets stop hostile templates and huge inputs with a clear error, and
// renders of one template run concurrently.
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "jinja/render_test_util.h"

namespace tpserve::jinja {
namespace {

bool HasError(const std::string& out, const std::string& text) {
  return out.rfind("ERR: ", 0) == 0 && out.find(text) != std::string::npos;
}

TEST(BudgetTest, OutputBytes) {
  RenderOptions options;
  options.max_output_bytes = 1000;
  EXPECT_EQ(RenderForTest("{% for i in range(10) %}0123456789{% endfor %}", "{}", options).size(), 100u);
  EXPECT_TRUE(HasError(RenderForTest("{% for i in range(200) %}0123456789{% endfor %}", "{}", options),
                       "output exceeds 1000 bytes"));
  EXPECT_TRUE(HasError(RenderForTest("{{ 'x' * 5000 }}", "{}", options), "exceeds 1000 bytes"));
  EXPECT_TRUE(HasError(
      RenderForTest("{% set ns = namespace(s='ab') %}{% for i in range(20) %}"
                    "{% set ns.s = ns.s ~ ns.s %}{% endfor %}", "{}", options),
      "exceeds the output budget"));
}

TEST(BudgetTest, Steps) {
  RenderOptions options;
  options.max_steps = 100000;
  EXPECT_TRUE(HasError(RenderForTest("{% for i in range(100000) %}{% for j in range(100000) %}"
                                     "{% endfor %}{% endfor %}", "{}", options),
                       "budget of 100000 steps"));
}

TEST(BudgetTest, MacroRecursion) {
  EXPECT_TRUE(HasError(RenderForTest("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "{}"),
                       "macro calls nest deeper than 64"));
  RenderOptions options;
  options.max_macro_depth = 5;
  EXPECT_EQ(RenderForTest("{% macro f(n) %}{% if n %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}"
                          "{{ f(4) }}", "{}", options),
            "4321");
}

TEST(BudgetTest, RangeIsBoundedAsInTheSandbox) {
  EXPECT_TRUE(HasError(RenderForTest("{{ range(100001)|length }}", "{}"), "MAX_RANGE (100000)"));
  EXPECT_EQ(RenderForTest("{{ range(100000)|length }}", "{}"), "100000");
}

TEST(BudgetTest, DeepParsingIsAnError) {
  const std::string parens = "{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}";
  EXPECT_TRUE(HasError(RenderForTest(parens, "{}"), "nests too deeply"));
  std::string sum = "{{ 1";
  for (int i = 0; i < 5000; ++i) sum += " + 1";
  EXPECT_TRUE(HasError(RenderForTest(sum + " }}", "{}"), "nests too deeply"));
  std::string ifs;
  for (int i = 0; i < 5000; ++i) ifs += "{% if true %}";
  EXPECT_TRUE(HasError(RenderForTest(ifs, "{}"), "nests too deeply"));
  EXPECT_TRUE(HasError(RenderForTest("{{ " + std::string(50000, '-') + "1 }}", "{}"), "nests too deeply"));
  EXPECT_TRUE(HasError(RenderForTest("{{ " + std::string(50000, '[') + std::string(50000, ']') + " }}", "{}"),
                       "nests too deeply"));
  EXPECT_TRUE(HasError(RenderForTest("{{ " + std::string(50000, '[') + " }}", "{}"), "unexpected '}'"));
}

TEST(BudgetTest, DeepValuesAreAnError) {
  EXPECT_TRUE(HasError(RenderForTest("{% set ns = namespace(v=[]) %}{% for i in range(1000) %}"
                                     "{% set ns.v = [ns.v] %}{% endfor %}{{ ns.v }}", "{}"),
                       "nests too deeply"));
  std::string deep = std::string(300, '[') + std::string(300, ']');
  EXPECT_TRUE(HasError(RenderForTest("{{ x }}", absl::StrCat("{\"x\": ", deep, "}")), "nests deeper"));
}

TEST(ConcurrencyTest, RendersOneTemplateFromManyThreads) {
  absl::StatusOr<Template> t = Template::Parse(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
      "{{ m.role }}:{{ m.content }};{% endfor %}{{ ns.n }}");
  ASSERT_TRUE(t.ok()) << t.status();
  std::vector<std::thread> threads;
  std::vector<std::string> outs(8);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      nlohmann::ordered_json ctx;
      ctx["messages"] = nlohmann::ordered_json::array();
      for (int k = 0; k <= i; ++k) ctx["messages"].push_back({{"role", "user"}, {"content", k}});
      for (int rep = 0; rep < 50; ++rep) outs[i] = t->Render(ctx).value_or("error");
    });
  }
  for (std::thread& th : threads) th.join();
  for (int i = 0; i < 8; ++i) {
    std::string want;
    for (int k = 0; k <= i; ++k) want += absl::StrCat("user:", k, ";");
    EXPECT_EQ(outs[i], want + std::to_string(i + 1));
  }
}

}  // namespace
}  // namespace tpserve::jinja
