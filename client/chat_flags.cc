#include "client/chat_flags.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "base/json_file.h"
#include "base/status_macros.h"
#include "base/utf8.h"

namespace tpserve {
namespace {

using Json = nlohmann::ordered_json;

absl::StatusOr<Json> ParseArray(const std::string& text, const std::string& source) {
  Json parsed = Json::parse(text, nullptr, false);
  if (parsed.is_discarded() || !parsed.is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": must be a JSON array"));
  }
  return parsed;
}

std::string Text(const Json& value) {
  return value.is_string() ? value.get<std::string>() : value.dump();
}

}  // namespace

void AddChatFlags(ArgParser& args, ChatFlags* flags) {
  args.AddString("system", &flags->system, "a system message first");
  args.AddString("messages-file", &flags->messages_file,
                 "earlier turns, a JSON array of OpenAI-style messages");
  args.AddString("tools-file", &flags->tools_file,
                 "tools the model may call, a JSON array of OpenAI-style tools");
  args.AddString("tool-choice", &flags->tool_choice,
                 "auto, none, required or a tool's name (default: auto with tools)");
  args.AddString("template-kwargs", &flags->template_kwargs,
                 "more chat-template variables, a JSON object (e.g. "
                 "'{\"enable_thinking\": false}')");
  args.AddBool("interactive", &flags->interactive,
               "read your turns from stdin, one per line, keeping the conversation");
}

absl::Status AppendMessagesJson(const std::string& text, const std::string& source,
                                v1::ChatRequest* request) {
  TPSERVE_ASSIGN_OR_RETURN(Json messages, ParseArray(text, source));
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& m = messages[i];
    const std::string where = absl::StrCat(source, ": [", i, "]");
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(where, " must be an object with a \"role\""));
    }
    v1::ChatMessage* out = request->add_messages();
    out->set_role(m["role"].get<std::string>());
    if (m.contains("content") && !m["content"].is_null()) {
      if (!m["content"].is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(where, ".content must be a string"));
      }
      out->set_content(m["content"].get<std::string>());
    }
    for (const char* key : {"tool_call_id", "name", "reasoning_content"}) {
      if (m.contains(key) && m[key].is_string()) {
        const std::string v = m[key].get<std::string>();
        if (std::string(key) == "tool_call_id") out->set_tool_call_id(v);
        if (std::string(key) == "name") out->set_name(v);
        if (std::string(key) == "reasoning_content") out->set_reasoning_content(v);
      }
    }
    if (m.contains("tool_calls") && m["tool_calls"].is_array()) {
      for (const Json& call : m["tool_calls"]) {
        const Json function = call.is_object() && call.contains("function") ? call["function"] : Json();
        if (!function.is_object() || !function.contains("name") || !function["name"].is_string()) {
          return absl::InvalidArgumentError(
              absl::StrCat(where, ".tool_calls: each needs function.name"));
        }
        v1::ToolCall* c = out->add_tool_calls();
        if (call.contains("id") && call["id"].is_string()) c->set_id(call["id"].get<std::string>());
        c->set_name(function["name"].get<std::string>());
        c->set_arguments_json(function.contains("arguments") ? Text(function["arguments"]) : "{}");
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::ChatRequest> BuildChatRequest(const ArgParser& args, const ChatFlags& chat,
                                                 const GenerateFlags& generate,
                                                 const std::string& message) {
  v1::ChatRequest request;
  // The sampling flags as generate reads them (its prompt is not used).
  TPSERVE_ASSIGN_OR_RETURN(v1::GenerateRequest sampling,
                           BuildGenerateRequest(args, generate, "unused"));
  *request.mutable_sampling() = sampling.sampling();
  if (sampling.has_skip_special_tokens()) {
    request.set_skip_special_tokens(sampling.skip_special_tokens());
  }
  request.set_request_id(sampling.request_id());
  if (!chat.system.empty()) {
    v1::ChatMessage* system = request.add_messages();
    system->set_role("system");
    system->set_content(chat.system);
  }
  if (!chat.messages_file.empty()) {
    TPSERVE_ASSIGN_OR_RETURN(std::string text, ReadTextFile(chat.messages_file, 64 << 20));
    TPSERVE_RETURN_IF_ERROR(
        AppendMessagesJson(text, absl::StrCat("--messages-file ", chat.messages_file), &request));
  }
  if (!message.empty()) {
    if (!ValidateUtf8(std::string_view(message)).ok()) {
      return absl::InvalidArgumentError("the message must be valid UTF-8");
    }
    v1::ChatMessage* user = request.add_messages();
    user->set_role("user");
    user->set_content(message);
  }
  if (request.messages_size() == 0 && !chat.interactive) {
    return absl::InvalidArgumentError("chat needs a message (or --messages-file)");
  }
  if (!chat.tools_file.empty()) {
    const std::string source = absl::StrCat("--tools-file ", chat.tools_file);
    TPSERVE_ASSIGN_OR_RETURN(std::string text, ReadTextFile(chat.tools_file, 16 << 20));
    TPSERVE_ASSIGN_OR_RETURN(Json tools, ParseArray(text, source));
    for (size_t i = 0; i < tools.size(); ++i) {
      const Json& t = tools[i];
      const Json function = t.is_object() && t.contains("function") ? t["function"] : t;
      if (!function.is_object() || !function.contains("name") || !function["name"].is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat(source, ": [", i, "] needs function.name"));
      }
      v1::Tool* tool = request.add_tools();
      tool->set_name(function["name"].get<std::string>());
      if (function.contains("description") && function["description"].is_string()) {
        tool->set_description(function["description"].get<std::string>());
      }
      if (function.contains("parameters")) tool->set_parameters_json(function["parameters"].dump());
    }
  }
  request.set_tool_choice(chat.tool_choice);
  if (!chat.template_kwargs.empty()) {
    Json kwargs = Json::parse(chat.template_kwargs, nullptr, false);
    if (kwargs.is_discarded() || !kwargs.is_object()) {
      return absl::InvalidArgumentError("--template-kwargs must be a JSON object");
    }
    request.set_template_kwargs_json(chat.template_kwargs);
  }
  return request;
}

}  // namespace tpserve
