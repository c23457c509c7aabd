#include "jinja/template.h"

#include "absl/status/status.h"
#include "base/status_macros.h"
#include "jinja/ast.h"
#include "jinja/lexer.h"
#include "jinja/parser.h"
#include "jinja/renderer.h"

namespace tpserve::jinja {

struct Template::Parsed {
  std::string name;
  StmtList body;
};

absl::StatusOr<Template> Template::Parse(std::string_view source, std::string name) {
  auto parsed = std::make_shared<Parsed>();
  parsed->name = std::move(name);
  TPSERVE_ASSIGN_OR_RETURN(parsed->body, ParseTemplate(NormalizeSource(source), parsed->name));
  return Template(std::move(parsed));
}

absl::StatusOr<std::string> Template::Render(const nlohmann::ordered_json& context,
                                             const RenderOptions& options) const {
  if (!context.is_object() && !context.is_null()) {
    return absl::InvalidArgumentError("the render context must be a JSON object");
  }
  TPSERVE_ASSIGN_OR_RETURN(Value values, FromJson(context.is_null() ? nlohmann::ordered_json::object() : context));
  return RenderValue(values, options);
}

absl::StatusOr<std::string> Template::RenderValue(const Value& context,
                                                  const RenderOptions& options) const {
  if (!context.is_dict()) return absl::InvalidArgumentError("the render context must be a dict");
  Renderer renderer(parsed_->name, options);
  return renderer.Render(parsed_->body, context);
}

const std::string& Template::name() const { return parsed_->name; }

}  // namespace tpserve::jinja
