// Test helpers: render a template as the tests expect (fixed clock, the
// error's message in place of the text) and the context most tests share.
#ifndef TPSERVE_JINJA_RENDER_TEST_UTIL_H_
#define TPSERVE_JINJA_RENDER_TEST_UTIL_H_

#include <ostream>
#include <string>

#include "gtest/gtest.h"
#include "jinja/template.h"

namespace tpserve::jinja {

// A template, the text jinja2 renders for it and the context (JSON).
struct RenderCase {
  std::string source;
  std::string want;
  std::string context;
};

inline void PrintTo(const RenderCase& c, std::ostream* os) { *os << c.source; }

inline const char kTestContext[] = R"json({"x": [1, 2, 3], "d": {"a": 1, "b": "two"}, "s": "Hello World", "m": {"content": "hi", "role": "user"}, "msgs": [{"role": "system", "content": "sys"}, {"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Hello!", "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]}], "n": null, "t": true, "f": 1.5, "i": 7, "u": "h\u00e9llo w\u00f6rld \u00df", "empty": [], "nested": {"k": {"j": [10, 20]}}})json";

// The rendered text, or "ERR: " and the error's message.
inline std::string RenderForTest(const std::string& source,
                                 const std::string& context = kTestContext,
                                 RenderOptions options = {}) {
  if (!options.now) options.now = [] { return absl::FromUnixSeconds(1700000000); };
  absl::StatusOr<Template> parsed = Template::Parse(source, "chat_template");
  if (!parsed.ok()) return "ERR: " + std::string(parsed.status().message());
  absl::StatusOr<std::string> out =
      parsed->Render(nlohmann::ordered_json::parse(context), options);
  if (!out.ok()) return "ERR: " + std::string(out.status().message());
  return *out;
}

}  // namespace tpserve::jinja

#endif  // TPSERVE_JINJA_RENDER_TEST_UTIL_H_
