// ReadChatRequest and PrepareChat (openai_request.h): /v1/chat/completions' body into
// tpserve's request and the chat template's inputs, then the rendered prompt.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "server/openai/openai_error.h"
#include "server/openai/openai_request.h"
#include "server/openai/request_fields.h"
#include "tpserve/v1/sampling_limits.h"

namespace tpserve {
namespace {

absl::StatusOr<OrderedJson> MessageText(const OrderedJson& content, const std::string& param) {
  if (content.is_null() || content.is_string()) return content;
  if (!content.is_array()) return ExpectedParam(param, "a string, an array of parts or null", content);
  std::vector<std::string> texts;
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string part_param = absl::StrCat(param, "[", i, "]");
    const OrderedJson& part = content[i];
    if (!part.is_object()) return ExpectedParam(part_param, "an object", part);
    const OrderedJson& type = Member(part, "type");
    if (!type.is_string()) return ExpectedParam(absl::StrCat(part_param, ".type"), "a string", type);
    const std::string kind = type.get<std::string>();
    if (kind != "text" && kind != "input_text") {
      return ParamError(part_param, absl::StrCat(part_param, ": content parts of type \"", kind,
                                                 "\" are not supported (text only)"));
    }
    const OrderedJson& text = Member(part, "text");
    if (!text.is_string()) return ExpectedParam(absl::StrCat(part_param, ".text"), "a string", text);
    texts.push_back(text.get<std::string>());
  }
  return OrderedJson(absl::StrJoin(texts, "\n"));
}

absl::StatusOr<OrderedJson> ReadToolCalls(const OrderedJson& calls, const std::string& param) {
  if (!calls.is_array()) return ExpectedParam(param, "an array", calls);
  OrderedJson out = OrderedJson::array();
  for (size_t j = 0; j < calls.size(); ++j) {
    const std::string call_param = absl::StrCat(param, "[", j, "]");
    const OrderedJson& call = calls[j];
    if (!call.is_object()) return ExpectedParam(call_param, "an object", call);
    OrderedJson copy = call;
    const OrderedJson& function = Member(call, "function");
    if (!function.is_object()) {
      return ExpectedParam(absl::StrCat(call_param, ".function"), "an object", function);
    }
    const OrderedJson& name = Member(function, "name");
    if (!name.is_string()) {
      return ExpectedParam(absl::StrCat(call_param, ".function.name"), "a string", name);
    }
    // Templates take the arguments as a mapping (they tojson or iterate it); OpenAI sends
    // them as JSON text.
    const OrderedJson& arguments = Member(function, "arguments");
    if (arguments.is_string()) {
      OrderedJson parsed = OrderedJson::parse(arguments.get<std::string>(), nullptr, false);
      if (parsed.is_discarded()) {
        return ParamError(absl::StrCat(call_param, ".function.arguments"),
                          absl::StrCat(call_param, ".function.arguments must be JSON text"));
      }
      copy["function"]["arguments"] = std::move(parsed);
    } else if (!arguments.is_object() && !arguments.is_null()) {
      return ExpectedParam(absl::StrCat(call_param, ".function.arguments"), "a JSON string or an object",
                      arguments);
    }
    out.push_back(std::move(copy));
  }
  return out;
}

absl::StatusOr<OrderedJson> ReadMessages(const OrderedJson& body) {
  const OrderedJson& messages = Member(body, "messages");
  if (!messages.is_array()) return ExpectedParam("messages", "an array", messages);
  if (messages.empty()) return ParamError("messages", "messages must not be empty");
  OrderedJson out = OrderedJson::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string param = absl::StrCat("messages[", i, "]");
    const OrderedJson& message = messages[i];
    if (!message.is_object()) return ExpectedParam(param, "an object", message);
    const OrderedJson& role = Member(message, "role");
    if (!role.is_string()) return ExpectedParam(param + ".role", "a string", role);
    const std::string r = role.get<std::string>();
    if (r != "system" && r != "developer" && r != "user" && r != "assistant" && r != "tool") {
      return ParamError(param + ".role",
                        absl::StrCat(param, ".role must be one of system, developer, user, "
                                            "assistant, tool; got \"", r, "\""));
    }
    OrderedJson copy = message;
    TPSERVE_ASSIGN_OR_RETURN(copy["content"],
                             MessageText(Member(message, "content"), param + ".content"));
    if (message.contains("tool_calls") && !message["tool_calls"].is_null()) {
      TPSERVE_ASSIGN_OR_RETURN(copy["tool_calls"],
                               ReadToolCalls(message["tool_calls"], param + ".tool_calls"));
    }
    for (const char* key : {"name", "tool_call_id", "reasoning_content"}) {
      const OrderedJson& v = Member(message, key);
      if (!v.is_null() && !v.is_string()) {
        return ExpectedParam(absl::StrCat(param, ".", key), "a string", v);
      }
    }
    out.push_back(std::move(copy));
  }
  return out;
}

absl::Status ReadTools(const OrderedJson& body, ChatRequest* request) {
  const OrderedJson& tools = Member(body, "tools");
  std::vector<std::string> names;
  if (!tools.is_null()) {
    if (!tools.is_array()) return ExpectedParam("tools", "an array", tools);
    for (size_t i = 0; i < tools.size(); ++i) {
      const std::string param = absl::StrCat("tools[", i, "]");
      const OrderedJson& tool = tools[i];
      if (!tool.is_object()) return ExpectedParam(param, "an object", tool);
      const OrderedJson& type = Member(tool, "type");
      if (!type.is_string() || type.get<std::string>() != "function") {
        return ParamError(param + ".type", param + ".type must be \"function\"");
      }
      const OrderedJson& function = Member(tool, "function");
      if (!function.is_object()) return ExpectedParam(param + ".function", "an object", function);
      const OrderedJson& name = Member(function, "name");
      if (!name.is_string() || name.get<std::string>().empty()) {
        return ParamError(param + ".function.name", param + ".function.name must be a non-empty string");
      }
      const OrderedJson& parameters = Member(function, "parameters");
      if (!parameters.is_null() && !parameters.is_object()) {
        return ExpectedParam(param + ".function.parameters", "an object", parameters);
      }
      names.push_back(name.get<std::string>());
    }
    if (!tools.empty()) request->tools = tools;
  }
  const bool have_tools = !names.empty();
  const OrderedJson& choice = Member(body, "tool_choice");
  request->tool_choice = have_tools ? ToolChoice::kAuto : ToolChoice::kNone;
  if (choice.is_string()) {
    const std::string c = choice.get<std::string>();
    if (c == "none") {
      request->tool_choice = ToolChoice::kNone;
    } else if (c == "auto" || c == "required") {
      if (!have_tools) {
        return ParamError("tool_choice", absl::StrCat("tool_choice \"", c, "\" needs tools"));
      }
      request->tool_choice = c == "auto" ? ToolChoice::kAuto : ToolChoice::kRequired;
    } else {
      return ParamError("tool_choice", absl::StrCat("tool_choice must be \"none\", \"auto\", "
                                                    "\"required\" or a named function; got \"",
                                                    c, "\""));
    }
  } else if (choice.is_object()) {
    const OrderedJson& function = Member(choice, "function");
    const OrderedJson& name = function.is_object() ? Member(function, "name") : function;
    if (!name.is_string()) return ExpectedParam("tool_choice.function.name", "a string", name);
    request->named_tool = name.get<std::string>();
    bool found = false;
    for (const std::string& n : names) found = found || n == request->named_tool;
    if (!found) {
      return ParamError("tool_choice", absl::StrCat("tool_choice names function \"",
                                                    request->named_tool,
                                                    "\", which is not among the tools"));
    }
    request->tool_choice = ToolChoice::kNamed;
  } else if (!choice.is_null()) {
    return ExpectedParam("tool_choice", "a string or an object", choice);
  }
  TPSERVE_ASSIGN_OR_RETURN(std::optional<bool> parallel, OptBool(body, "parallel_tool_calls"));
  (void)parallel;  // accepted; every call the model makes is returned
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ChatRequest> ReadChatRequest(const OrderedJson& body,
                                            absl::string_view served_model) {
  ChatRequest out;
  TPSERVE_RETURN_IF_ERROR(ReadCommon(body, served_model, &out.common));
  TPSERVE_RETURN_IF_ERROR(RefuseUnsupported(body));
  if (!Member(body, "chat_template").is_null()) {
    return ParamError("chat_template",
                      "chat_template: a request cannot bring its own template; the server "
                      "renders the model's (or --chat-template)");
  }
  TPSERVE_RETURN_IF_ERROR(ReadSampling(body, 0, true, &out.generate));
  TPSERVE_ASSIGN_OR_RETURN(std::optional<bool> logprobs, OptBool(body, "logprobs"));
  out.logprobs = logprobs.value_or(false);
  TPSERVE_ASSIGN_OR_RETURN(std::optional<int> top, OptIntIn(body, "top_logprobs", 0, kMaxLogprobs));
  if (top.has_value() && !out.logprobs) {
    return ParamError("top_logprobs", "top_logprobs needs logprobs: true");
  }
  out.top_logprobs = top.value_or(0);
  if (out.logprobs) out.generate.mutable_sampling()->set_logprobs(out.top_logprobs);
  // The template adds the special tokens it wants (vLLM's default for chat).
  TPSERVE_ASSIGN_OR_RETURN(std::optional<bool> add_special, OptBool(body, "add_special_tokens"));
  out.generate.set_add_special_tokens(add_special.value_or(false));
  out.generate.set_request_id(out.common.request_id);

  TPSERVE_ASSIGN_OR_RETURN(out.messages, ReadMessages(body));
  TPSERVE_RETURN_IF_ERROR(ReadTools(body, &out));
  const OrderedJson& documents = Member(body, "documents");
  if (!documents.is_null()) {
    if (!documents.is_array()) return ExpectedParam("documents", "an array of objects", documents);
    for (size_t i = 0; i < documents.size(); ++i) {
      if (!documents[i].is_object()) {
        return ExpectedParam(absl::StrCat("documents[", i, "]"), "an object", documents[i]);
      }
    }
    out.documents = documents;
  }
  const OrderedJson& kwargs = Member(body, "chat_template_kwargs");
  if (!kwargs.is_null()) {
    if (!kwargs.is_object()) return ExpectedParam("chat_template_kwargs", "an object", kwargs);
    out.template_kwargs = kwargs;
  }
  TPSERVE_ASSIGN_OR_RETURN(std::optional<bool> add_prompt, OptBool(body, "add_generation_prompt"));
  TPSERVE_ASSIGN_OR_RETURN(std::optional<bool> continue_final,
                           OptBool(body, "continue_final_message"));
  out.continue_final_message = continue_final.value_or(false);
  out.add_generation_prompt = add_prompt.value_or(!out.continue_final_message);
  if (out.add_generation_prompt && out.continue_final_message) {
    return ParamError("continue_final_message",
                      "continue_final_message and add_generation_prompt cannot both be true");
  }
  if (out.continue_final_message &&
      Member(out.messages.back(), "role").get<std::string>() != "assistant") {
    return ParamError("continue_final_message",
                      "continue_final_message needs the last message to be the assistant's");
  }
  return out;
}

absl::StatusOr<PreparedChat> PrepareChat(ChatRequest request, const ChatConfig& config) {
  if (config.chat_template == nullptr) {
    return ParamError("messages",
                      "this model has no chat template; start tpserve with --chat-template "
                      "FILE, or send a prompt to /v1/completions (Generate on gRPC)");
  }
  PreparedChat out;
  out.parsing.reasoning_parser = config.reasoning_parser;
  out.parsing.tool_call_ids = config.tool_call_ids;
  if (request.tool_choice != ToolChoice::kNone) {
    if (config.tool_call_parser.empty()) {
      return ParamError("tool_choice",
                        "tool calls need the server started with --tool-call-parser (e.g. "
                        "hermes, llama3_json); or send tool_choice \"none\"");
    }
    out.parsing.tool_parser = config.tool_call_parser;
  }
  ChatTemplateInputs inputs;
  inputs.messages = std::move(request.messages);
  inputs.tools = std::move(request.tools);
  inputs.documents = std::move(request.documents);
  inputs.add_generation_prompt = request.add_generation_prompt;
  inputs.continue_final_message = request.continue_final_message;
  inputs.kwargs = std::move(request.template_kwargs);
  absl::StatusOr<std::string> prompt = config.chat_template->Render(inputs);
  if (!prompt.ok()) {
    return ParamError("messages", absl::StrCat("the chat template failed on these messages: ",
                                               prompt.status().message()));
  }
  out.parsing.prompt_opened_thinking = PromptOpensThinking(*prompt);
  if (request.tool_choice == ToolChoice::kRequired || request.tool_choice == ToolChoice::kNamed) {
    // No constrained decoding: the answer is started as a call, and the model goes on.
    out.parsing.forced_tool_prefix = ForcedToolCallPrefix(
        config.tool_call_parser,
        request.tool_choice == ToolChoice::kNamed ? &request.named_tool : nullptr);
    *prompt += out.parsing.forced_tool_prefix;
  }
  out.generate = std::move(request.generate);
  out.generate.set_text(*std::move(prompt));
  out.choices = out.generate.sampling().has_n() ? out.generate.sampling().n() : 1;
  return out;
}

}  // namespace tpserve
