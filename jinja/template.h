// A Jinja2 template interpreter that renders Hugging Face chat templates as
// Python transformers does, byte for byte: the environment of
// transformers.utils.chat_template_utils (sandboxed and immutable,
// trim_blocks, lstrip_blocks, loop controls, {% generation %}, the
// raise_exception and strftime_now globals, json.dumps as tojson).
//
//   TPSERVE_ASSIGN_OR_RETURN(Template t, Template::Parse(source, "chat_template"));
//   TPSERVE_ASSIGN_OR_RETURN(std::string prompt, t.Render(context_json));
//
// Errors are absl::Status INVALID_ARGUMENT naming the place,
// "chat_template:12:5: unexpected 'endfor'"; raise_exception's message comes
// verbatim after the place. Nothing throws; budgets (RenderOptions) stop
// renders that would run away.
// Threading: a Template is immutable after Parse; any number of threads may
// Render it at once. Copies share the parsed tree. A render recurses as deep as
// the template nests, bounded (parse nesting, kMaxRenderDepth): it needs about
// 1 MiB of the calling thread's stack at worst.
#ifndef TPSERVE_JINJA_TEMPLATE_H_
#define TPSERVE_JINJA_TEMPLATE_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "jinja/json_convert.h"
#include "jinja/render_options.h"
#include "jinja/value.h"
#include "nlohmann/json.hpp"

namespace tpserve::jinja {

class Template {
 public:
  static absl::StatusOr<Template> Parse(std::string_view source, std::string name = "template");

  // `context`: a JSON object whose members are the template's variables.
  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& context,
                                     const RenderOptions& options = {}) const;
  // `context`: a dict value (e.g. from FromJson, with values added).
  absl::StatusOr<std::string> RenderValue(const Value& context,
                                          const RenderOptions& options = {}) const;

  const std::string& name() const;

 private:
  struct Parsed;
  explicit Template(std::shared_ptr<const Parsed> parsed) : parsed_(std::move(parsed)) {}

  std::shared_ptr<const Parsed> parsed_;
};

}  // namespace tpserve::jinja

#endif  // TPSERVE_JINJA_TEMPLATE_H_
