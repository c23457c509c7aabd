#include "server/grpc/chat_convert.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/generate_convert.h"

namespace tpserve {
namespace {

// `text` parsed as JSON of the kind `is_kind` accepts; `field` names it in errors.
absl::StatusOr<OrderedJson> JsonField(const std::string& text, const std::string& field,
                                      bool (OrderedJson::*is_kind)() const, const char* kind) {
  OrderedJson parsed = OrderedJson::parse(text, nullptr, false);
  if (parsed.is_discarded() || !(parsed.*is_kind)()) {
    return absl::InvalidArgumentError(absl::StrCat(field, " must be a JSON ", kind));
  }
  return parsed;
}

}  // namespace

absl::StatusOr<OrderedJson> ChatBody(const v1::ChatRequest& request) {
  OrderedJson body = OrderedJson::object();
  OrderedJson messages = OrderedJson::array();
  for (const v1::ChatMessage& m : request.messages()) {
    OrderedJson message = {{"role", m.role()}};
    if (m.has_content()) message["content"] = m.content();
    if (m.tool_calls_size() > 0) {
      OrderedJson calls = OrderedJson::array();
      for (const v1::ToolCall& call : m.tool_calls()) {
        calls.push_back({{"id", call.id()},
                         {"type", "function"},
                         {"function", {{"name", call.name()}, {"arguments", call.arguments_json()}}}});
      }
      message["tool_calls"] = std::move(calls);
    }
    if (!m.tool_call_id().empty()) message["tool_call_id"] = m.tool_call_id();
    if (!m.name().empty()) message["name"] = m.name();
    if (!m.reasoning_content().empty()) message["reasoning_content"] = m.reasoning_content();
    messages.push_back(std::move(message));
  }
  body["messages"] = std::move(messages);
  if (request.tools_size() > 0) {
    OrderedJson tools = OrderedJson::array();
    for (int i = 0; i < request.tools_size(); ++i) {
      const v1::Tool& tool = request.tools(i);
      OrderedJson function = {{"name", tool.name()}};
      if (!tool.description().empty()) function["description"] = tool.description();
      if (!tool.parameters_json().empty()) {
        absl::StatusOr<OrderedJson> parameters =
            JsonField(tool.parameters_json(), absl::StrCat("tools[", i, "].parameters_json"),
                      &OrderedJson::is_object, "object");
        if (!parameters.ok()) return parameters.status();
        function["parameters"] = *std::move(parameters);
      }
      tools.push_back({{"type", "function"}, {"function", std::move(function)}});
    }
    body["tools"] = std::move(tools);
  }
  const std::string& choice = request.tool_choice();
  if (choice == "auto" || choice == "none" || choice == "required") {
    body["tool_choice"] = choice;
  } else if (!choice.empty()) {
    body["tool_choice"] = {{"type", "function"}, {"function", {{"name", choice}}}};
  }
  if (!request.template_kwargs_json().empty()) {
    absl::StatusOr<OrderedJson> kwargs = JsonField(
        request.template_kwargs_json(), "template_kwargs_json", &OrderedJson::is_object, "object");
    if (!kwargs.ok()) return kwargs.status();
    body["chat_template_kwargs"] = *std::move(kwargs);
  }
  if (!request.documents_json().empty()) {
    absl::StatusOr<OrderedJson> documents =
        JsonField(request.documents_json(), "documents_json", &OrderedJson::is_array, "array");
    if (!documents.ok()) return documents.status();
    body["documents"] = *std::move(documents);
  }
  if (request.has_add_generation_prompt()) {
    body["add_generation_prompt"] = request.add_generation_prompt();
  }
  if (request.continue_final_message()) body["continue_final_message"] = true;
  return body;
}

void AppendChatChunk(const EngineChunk& chunk, ChatSplitter& splitter, bool whole,
                     v1::ChatResponse* response) {
  const bool last = chunk.finish_reason.has_value();
  ParsedDelta delta = splitter.Feed(chunk.text, last);
  response->set_index(chunk.index);
  response->mutable_content()->append(delta.content);
  response->mutable_reasoning_content()->append(delta.reasoning);
  response->mutable_token_ids()->Add(chunk.token_ids.begin(), chunk.token_ids.end());
  AppendLogprobs(chunk.logprobs, response->mutable_logprobs());
  if (!whole) {
    for (const ToolCallDelta& d : delta.tool_calls) {
      v1::ToolCallDelta* out = response->add_tool_calls();
      out->set_index(d.index);
      out->set_id(d.id);
      out->set_name(d.name);
      out->set_arguments_json(d.arguments);
    }
  }
  if (!last) return;
  if (whole && splitter.tools() != nullptr) {
    const auto& calls = splitter.tools()->calls();
    for (size_t i = 0; i < calls.size(); ++i) {
      v1::ToolCallDelta* out = response->add_tool_calls();
      out->set_index(static_cast<int>(i));
      out->set_id(calls[i].id);
      out->set_name(calls[i].name);
      out->set_arguments_json(calls[i].arguments);
    }
  }
  response->set_finish_reason(splitter.made_tool_calls() ? v1::FINISH_REASON_TOOL_CALLS
                                                         : ToProtoFinishReason(*chunk.finish_reason));
  response->mutable_usage()->set_prompt_tokens(chunk.prompt_tokens);
  response->mutable_usage()->set_completion_tokens(chunk.completion_tokens);
  response->mutable_usage()->set_cached_prompt_tokens(chunk.cached_prompt_tokens);
}

}  // namespace tpserve
