// ChatTemplate: a model's chat template, rendered as transformers' apply_chat_template
// renders it (transformers 5: utils/chat_template_utils.py render_jinja_template), on
// tpserve's own Jinja interpreter (jinja/).
//
// Which template (ChatTemplate::Load), first found wins:
//   1. the --chat-template file;
//   2. the model directory's chat_template.jinja;
//   3. tokenizer_config.json's "chat_template": a string, or a list of
//      {"name", "template"} of which "default" serves requests without tools and
//      "tool_use" (when present) those with tools, as transformers picks them.
// Each is parsed once, at load: a syntax error fails the load naming the file, line
// and column.
//
// Rendering (Render) follows render_jinja_template: the template sees messages, tools
// (null without), documents (null without), add_generation_prompt, the tokenizer's
// bos_token and eos_token, and the request's extra kwargs (enable_thinking, ...);
// a message's keys whose value is null are dropped, reasoning_content is aliased as transformers does (a message with reasoning under
// reasoning_content, thinking or reasoning gets it under the first two names), and
// continue_final_message cuts the rendered text right after the final message's content,
// found through a marker appended to it. Errors (raise_exception, a missing variable's
// misuse, a budget) are INVALID_ARGUMENT with the template's message. Thread-safe.
#ifndef TPSERVE_SERVER_CHAT_CHAT_TEMPLATE_H_
#define TPSERVE_SERVER_CHAT_CHAT_TEMPLATE_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "jinja/template.h"

namespace tpserve {

struct ChatTemplateInputs {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;      // an array, or null
  nlohmann::ordered_json documents;  // an array, or null
  bool add_generation_prompt = false;
  bool continue_final_message = false;
  // Further template variables (the request's chat_template_kwargs); they cannot
  // replace messages, tools, documents or add_generation_prompt.
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
};

// The tokenizer's special tokens the template may print.
struct ChatSpecialTokens {
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
};

class ChatTemplate {
 public:
  // NOT_FOUND (naming where it looked) when the model has no template and there is no
  // override; INVALID_ARGUMENT naming the file for one that cannot be read or parsed.
  static absl::StatusOr<std::unique_ptr<ChatTemplate>> Load(const std::string& model_dir,
                                                            const std::string& override_path,
                                                            ChatSpecialTokens tokens);
  // From template texts by name ("default", "tool_use", ...); `origin` names them in
  // errors. At least one; with one only, it serves every request whatever its name.
  static absl::StatusOr<std::unique_ptr<ChatTemplate>> FromTexts(
      const std::map<std::string, std::string>& texts, const std::string& origin,
      ChatSpecialTokens tokens);

  absl::StatusOr<std::string> Render(const ChatTemplateInputs& inputs) const;

  // strftime_now's clock (tests fix it); default absl::Now() in the local time zone.
  void set_clock(std::function<absl::Time()> now) { now_ = std::move(now); }
  // Where the template came from, for the startup log.
  const std::string& origin() const { return origin_; }

 private:
  struct Named {
    std::string text;  // kept: continue_final_message checks the field is read
    std::unique_ptr<jinja::Template> compiled;
  };
  ChatTemplate() = default;
  const Named& Select(bool with_tools) const;

  std::map<std::string, Named> templates_;
  std::string origin_;
  ChatSpecialTokens tokens_;
  std::function<absl::Time()> now_;
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_CHAT_CHAT_TEMPLATE_H_
