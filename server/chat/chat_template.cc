#include "server/chat/chat_template.h"

#include <filesystem>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/json_file.h"
#include "base/status_macros.h"
#include "jinja/unicode.h"

namespace tpserve {
namespace {

using OrderedJson = nlohmann::ordered_json;

// A chat template is text a person wrote; real ones are under 32 KiB.
constexpr uint64_t kMaxTemplateBytes = uint64_t{1} << 20;

// transformers marks the final message with this to find where its content ends.
constexpr absl::string_view kContinueTag = "CONTINUE_FINAL_MESSAGE_TAG ";

// Python's str.strip() and str.rstrip(), as transformers applies them to the render.
std::string PyStrip(absl::string_view text) {
  return std::string(jinja::PyStrip(std::string_view(text.data(), text.size()), nullptr,
                                    /*left=*/true, /*right=*/true));
}
std::string PyRstrip(absl::string_view text) {
  return std::string(jinja::PyStrip(std::string_view(text.data(), text.size()), nullptr,
                                    /*left=*/false, /*right=*/true));
}

// What the template sees of a message, as apply_chat_template prepares it: keys whose
// value is null dropped (_normalize_chat_messages: an OpenAI client's "content": null
// next to tool_calls), then reasoning under any of its names offered as "thinking"
// (first) and "reasoning_content" too (_alias_reasoning_fields).
OrderedJson PrepareMessage(const OrderedJson& given) {
  if (!given.is_object()) return given;
  OrderedJson message = OrderedJson::object();
  for (auto it = given.begin(); it != given.end(); ++it) {
    if (!it.value().is_null()) message[it.key()] = it.value();
  }
  const OrderedJson* reasoning = nullptr;
  for (const char* key : {"reasoning_content", "thinking", "reasoning"}) {
    auto it = message.find(key);
    if (it != message.end() && !it->is_null()) {
      reasoning = &*it;
      break;
    }
  }
  if (reasoning == nullptr) return message;
  OrderedJson out = OrderedJson::object();
  out["thinking"] = *reasoning;
  for (auto it = message.begin(); it != message.end(); ++it) out[it.key()] = it.value();
  out["reasoning_content"] = *reasoning;
  return out;
}

absl::StatusOr<std::string> ReadTemplateFile(const std::string& path) {
  return ReadTextFile(path, kMaxTemplateBytes);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ChatTemplate>> ChatTemplate::FromTexts(
    const std::map<std::string, std::string>& texts, const std::string& origin,
    ChatSpecialTokens tokens) {
  if (texts.empty()) return absl::InvalidArgumentError(absl::StrCat(origin, ": no template"));
  std::unique_ptr<ChatTemplate> out(new ChatTemplate());
  out->origin_ = origin;
  out->tokens_ = std::move(tokens);
  for (const auto& [name, text] : texts) {
    const std::string where = texts.size() == 1 ? origin : absl::StrCat(origin, " (", name, ")");
    absl::StatusOr<jinja::Template> compiled = jinja::Template::Parse(text, where);
    if (!compiled.ok()) return compiled.status();
    out->templates_[name] =
        Named{text, std::make_unique<jinja::Template>(*std::move(compiled))};
  }
  return out;
}

absl::StatusOr<std::unique_ptr<ChatTemplate>> ChatTemplate::Load(const std::string& model_dir,
                                                                 const std::string& override_path,
                                                                 ChatSpecialTokens tokens) {
  if (!override_path.empty()) {
    TPSERVE_ASSIGN_OR_RETURN(std::string text, ReadTemplateFile(override_path));
    return FromTexts({{"default", text}}, override_path, std::move(tokens));
  }
  const std::string jinja_path = (std::filesystem::path(model_dir) / "chat_template.jinja").string();
  absl::StatusOr<std::string> jinja_text = ReadTemplateFile(jinja_path);
  if (jinja_text.ok()) return FromTexts({{"default", *jinja_text}}, jinja_path, std::move(tokens));
  if (!absl::IsNotFound(jinja_text.status())) return jinja_text.status();

  const std::string config_path =
      (std::filesystem::path(model_dir) / "tokenizer_config.json").string();
  absl::StatusOr<std::string> config_text = ReadTextFile(config_path);
  if (absl::IsNotFound(config_text.status())) {
    return absl::NotFoundError(absl::StrCat("no chat template: neither ", jinja_path, " nor ",
                                            config_path, " exists"));
  }
  if (!config_text.ok()) return config_text.status();
  TPSERVE_ASSIGN_OR_RETURN(nlohmann::json config,
                           ParseJsonObject(*config_text, config_path, false));
  auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) {
    return absl::NotFoundError(absl::StrCat("no chat template: ", jinja_path, " does not exist and ",
                                            config_path, " has no \"chat_template\""));
  }
  const std::string origin = absl::StrCat(config_path, " chat_template");
  if (it->is_string()) {
    return FromTexts({{"default", it->get<std::string>()}}, origin, std::move(tokens));
  }
  if (!it->is_array() || it->empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        origin, ": must be a string or a non-empty list of {\"name\", \"template\"}"));
  }
  std::map<std::string, std::string> texts;
  for (size_t i = 0; i < it->size(); ++i) {
    const nlohmann::json& entry = (*it)[i];
    if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() ||
        !entry.contains("template") || !entry["template"].is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(
          origin, "[", i, "]: must be an object with string \"name\" and \"template\""));
    }
    if (!texts.emplace(entry["name"].get<std::string>(), entry["template"].get<std::string>())
             .second) {
      return absl::InvalidArgumentError(
          absl::StrCat(origin, "[", i, "]: name \"", entry["name"].get<std::string>(),
                       "\" appears twice"));
    }
  }
  return FromTexts(texts, origin, std::move(tokens));
}

const ChatTemplate::Named& ChatTemplate::Select(bool with_tools) const {
  if (templates_.size() == 1) return templates_.begin()->second;
  if (with_tools) {
    auto it = templates_.find("tool_use");
    if (it != templates_.end()) return it->second;
  }
  auto it = templates_.find("default");
  return it != templates_.end() ? it->second : templates_.begin()->second;
}

absl::StatusOr<std::string> ChatTemplate::Render(const ChatTemplateInputs& inputs) const {
  const Named& chosen = Select(!inputs.tools.is_null());
  OrderedJson context = OrderedJson::object();
  // transformers passes the tokenizer's special tokens first; the request's kwargs may
  // set others, never the inputs themselves.
  if (tokens_.bos_token.has_value()) context["bos_token"] = *tokens_.bos_token;
  if (tokens_.eos_token.has_value()) context["eos_token"] = *tokens_.eos_token;
  for (auto it = inputs.kwargs.begin(); it != inputs.kwargs.end(); ++it) {
    const std::string& key = it.key();
    if (key == "messages" || key == "tools" || key == "documents" ||
        key == "add_generation_prompt") {
      return absl::InvalidArgumentError(
          absl::StrCat("chat_template_kwargs cannot set \"", key, "\""));
    }
    context[key] = it.value();
  }
  OrderedJson messages = OrderedJson::array();
  for (const OrderedJson& message : inputs.messages) messages.push_back(PrepareMessage(message));

  std::string final_text;  // the final message's text, before the marker
  if (inputs.continue_final_message) {
    if (messages.empty()) {
      return absl::InvalidArgumentError("continue_final_message is set but there are no messages");
    }
    if (!absl::StrContains(chosen.text, "content")) {
      return absl::InvalidArgumentError(
          "continue_final_message: the chat template does not read the messages' content");
    }
    OrderedJson& content = messages.back()["content"];
    if (content.is_string()) {
      final_text = content.get<std::string>();
      content = final_text + std::string(kContinueTag);
    } else if (content.is_array()) {
      bool found = false;
      for (auto block = content.rbegin(); block != content.rend() && !found; ++block) {
        if (block->is_object() && block->contains("text") && (*block)["text"].is_string()) {
          final_text = (*block)["text"].get<std::string>();
          (*block)["text"] = final_text + std::string(kContinueTag);
          found = true;
        }
      }
      if (!found) {
        return absl::InvalidArgumentError(
            "continue_final_message is set but the final message has no text to continue");
      }
    } else {
      return absl::InvalidArgumentError(
          "continue_final_message is set but the final message has no content to continue");
    }
  }
  context["messages"] = std::move(messages);
  context["tools"] = inputs.tools;
  context["documents"] = inputs.documents;
  context["add_generation_prompt"] = inputs.add_generation_prompt;

  jinja::RenderOptions options;
  if (now_) options.now = now_;
  TPSERVE_ASSIGN_OR_RETURN(std::string rendered, chosen.compiled->Render(context, options));
  if (!inputs.continue_final_message) return rendered;

  const std::string tag_core = PyStrip(kContinueTag);
  if (!absl::StrContains(rendered, PyStrip(final_text)) ||
      !absl::StrContains(rendered, tag_core)) {
    return absl::InvalidArgumentError(
        "continue_final_message is set but the final message does not appear in the chat "
        "after applying the chat template (the template deletes part of it)");
  }
  const size_t tag_at = rendered.rfind(tag_core);
  if (absl::string_view(rendered).substr(tag_at, kContinueTag.size()) == kContinueTag) {
    return rendered.substr(0, tag_at);
  }
  return PyRstrip(absl::string_view(rendered).substr(0, tag_at));
}

}  // namespace tpserve
