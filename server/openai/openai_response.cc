#include "server/openai/openai_response.h"

#include <cmath>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace tpserve {
namespace {

using Json = nlohmann::json;

// JSON text of a value built from engine output (valid UTF-8 by the engine's contract;
// replaced rather than thrown on, should that ever break).
std::string Dump(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

double Logprob(float value) {
  return std::isfinite(value) ? static_cast<double>(value) : -9999.0;
}

Json Bytes(const std::string& text) {
  Json bytes = Json::array();
  for (unsigned char c : text) bytes.push_back(static_cast<int>(c));
  return bytes;
}

int64_t CodePoints(const std::string& text) {
  int64_t count = 0;
  for (unsigned char c : text) count += (c & 0xC0) != 0x80;
  return count;
}

}  // namespace

std::string NewResponseId(absl::string_view prefix) {
  thread_local std::mt19937_64 engine(std::random_device{}());
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(prefix);
  for (int i = 0; i < 2; ++i) {
    uint64_t bits = engine();
    for (int j = 0; j < 16; ++j, bits >>= 4) id.push_back(kHex[bits & 15]);
  }
  return id;
}

std::string OpenAiFinishReason(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStop:
    case FinishReason::kEos:
      return "stop";
    case FinishReason::kCancelled:
      return "abort";
  }
  return "stop";
}

// ---- /v1/completions ----

CompletionOutput::CompletionOutput(ResponseIdentity identity, int prompts, int n, int logprobs,
                                   std::vector<std::string> echo, bool include_usage)
    : identity_(std::move(identity)),
      n_(n),
      logprobs_(logprobs),
      echo_(std::move(echo)),
      include_usage_(include_usage),
      choices_(static_cast<size_t>(prompts) * n),
      prompt_tokens_(prompts, 0),
      cached_tokens_(prompts, 0) {}

Json CompletionOutput::Logprobs(const std::vector<PositionLogprobs>& positions,
                                Choice& choice) const {
  Json out = {{"tokens", Json::array()},
              {"token_logprobs", Json::array()},
              {"top_logprobs", Json::array()},
              {"text_offset", Json::array()}};
  for (const PositionLogprobs& p : positions) {
    out["tokens"].push_back(p.chosen.text);
    out["token_logprobs"].push_back(Logprob(p.chosen.logprob));
    if (logprobs_ > 0) {
      Json top = Json::object();
      for (const TokenLogprob& alt : p.top) top[alt.text] = Logprob(alt.logprob);
      // The sampled token is always listed, as OpenAI and vLLM do.
      if (!top.contains(p.chosen.text)) top[p.chosen.text] = Logprob(p.chosen.logprob);
      out["top_logprobs"].push_back(std::move(top));
    } else {
      out["top_logprobs"].push_back(nullptr);
    }
    out["text_offset"].push_back(choice.offset);
    choice.offset += CodePoints(p.chosen.text);
  }
  return out;
}

std::vector<std::string> CompletionOutput::Feed(const EngineChunk& chunk) {
  Choice& choice = choices_.at(chunk.index);
  const int prompt = chunk.index / n_;
  std::string text;
  if (!choice.started) {
    choice.started = true;
    text = echo_.empty() ? "" : echo_[prompt];
    choice.offset = CodePoints(text);
  }
  text += chunk.text;
  choice.token_ids.insert(choice.token_ids.end(), chunk.token_ids.begin(), chunk.token_ids.end());
  Json logprobs;
  if (logprobs_ >= 0) logprobs = Logprobs(chunk.logprobs, choice);
  choice.text += text;
  if (logprobs_ >= 0) {
    if (choice.logprobs.is_null()) {
      choice.logprobs = logprobs;
    } else {
      for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"}) {
        for (Json& v : logprobs[key]) choice.logprobs[key].push_back(std::move(v));
      }
    }
  }
  Json finish;
  if (chunk.finish_reason.has_value()) {
    choice.finish_reason = OpenAiFinishReason(*chunk.finish_reason);
    finish = choice.finish_reason;
    prompt_tokens_[prompt] = chunk.prompt_tokens;
    cached_tokens_[prompt] = chunk.cached_prompt_tokens;
    completion_tokens_ += chunk.completion_tokens;
  }
  const bool ids = return_token_ids_ && !chunk.token_ids.empty();
  if (text.empty() && finish.is_null() && chunk.logprobs.empty() && !ids) return {};
  Json entry = {{"index", chunk.index}, {"text", text}, {"logprobs", logprobs}, {"finish_reason", finish}};
  if (return_token_ids_) entry["token_ids"] = chunk.token_ids;
  Json event = {{"id", identity_.id},
                {"object", "text_completion"},
                {"created", identity_.created},
                {"model", identity_.model},
                {"choices", Json::array({std::move(entry)})}};
  if (include_usage_) event["usage"] = nullptr;
  return {Dump(event)};
}

Json CompletionOutput::Usage() const {
  int prompt = 0;
  int cached = 0;
  for (size_t i = 0; i < prompt_tokens_.size(); ++i) {
    prompt += prompt_tokens_[i];
    cached += cached_tokens_[i];
  }
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion_tokens_},
          {"total_tokens", prompt + completion_tokens_},
          {"prompt_tokens_details", {{"cached_tokens", cached}}}};
}

std::string CompletionOutput::UsageEvent() const {
  return Dump({{"id", identity_.id},
               {"object", "text_completion"},
               {"created", identity_.created},
               {"model", identity_.model},
               {"choices", Json::array()},
               {"usage", Usage()}});
}

std::string CompletionOutput::Body() const {
  Json choices = Json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    Json entry = {{"index", i},
                  {"text", c.text},
                  {"logprobs", c.logprobs},
                  {"finish_reason", c.finish_reason.empty() ? Json() : Json(c.finish_reason)}};
    if (return_token_ids_) entry["token_ids"] = c.token_ids;
    choices.push_back(std::move(entry));
  }
  return Dump({{"id", identity_.id},
               {"object", "text_completion"},
               {"created", identity_.created},
               {"model", identity_.model},
               {"choices", std::move(choices)},
               {"usage", Usage()}});
}

// ---- /v1/chat/completions ----

absl::StatusOr<std::unique_ptr<ChatOutput>> ChatOutput::Create(ResponseIdentity identity,
                                                               int choices, int logprobs,
                                                               const ChatParsing& parsing,
                                                               bool include_usage) {
  std::unique_ptr<ChatOutput> out(new ChatOutput(std::move(identity), logprobs, include_usage));
  out->choices_.resize(choices);
  for (Choice& c : out->choices_) {
    TPSERVE_ASSIGN_OR_RETURN(c.splitter, ChatSplitter::Create(parsing));
  }
  return out;
}

Json ChatOutput::Event(int index, Json delta, const Json& logprobs,
                       const std::string& finish_reason) const {
  Json event = {{"id", identity_.id},
                {"object", "chat.completion.chunk"},
                {"created", identity_.created},
                {"model", identity_.model},
                {"choices", Json::array({Json{{"index", index},
                                              {"delta", std::move(delta)},
                                              {"logprobs", logprobs},
                                              {"finish_reason", finish_reason.empty()
                                                                    ? Json()
                                                                    : Json(finish_reason)}}})}};
  if (include_usage_) event["usage"] = nullptr;
  return event;
}

namespace {

Json ChatLogprobs(const std::vector<PositionLogprobs>& positions) {
  Json content = Json::array();
  for (const PositionLogprobs& p : positions) {
    Json top = Json::array();
    for (const TokenLogprob& alt : p.top) {
      top.push_back({{"token", alt.text},
                     {"logprob", Logprob(alt.logprob)},
                     {"bytes", Bytes(alt.text)}});
    }
    content.push_back({{"token", p.chosen.text},
                       {"logprob", Logprob(p.chosen.logprob)},
                       {"bytes", Bytes(p.chosen.text)},
                       {"top_logprobs", std::move(top)}});
  }
  return content;
}

// One entry per call in an event, as OpenAI streams them: a call's first delta (id,
// type, name) and the arguments released with it are merged.
Json ToolCallDeltas(const std::vector<ToolCallDelta>& deltas) {
  Json out = Json::array();
  for (const ToolCallDelta& d : deltas) {
    if (!out.empty() && out.back()["index"] == d.index && d.id.empty()) {
      Json& arguments = out.back()["function"]["arguments"];
      arguments = arguments.get<std::string>() + d.arguments;
      continue;
    }
    Json call = {{"index", d.index}};
    Json function = Json::object();
    if (!d.id.empty()) {
      call["id"] = d.id;
      call["type"] = "function";
      function["name"] = d.name;
    }
    function["arguments"] = d.arguments;
    call["function"] = std::move(function);
    out.push_back(std::move(call));
  }
  return out;
}

}  // namespace

std::vector<std::string> ChatOutput::Feed(const EngineChunk& chunk) {
  Choice& choice = choices_.at(chunk.index);
  std::vector<std::string> events;
  if (!choice.started) {
    choice.started = true;
    events.push_back(
        Dump(Event(chunk.index, {{"role", "assistant"}, {"content", ""}}, nullptr, "")));
  }
  const bool last = chunk.finish_reason.has_value();
  choice.token_ids.insert(choice.token_ids.end(), chunk.token_ids.begin(), chunk.token_ids.end());
  ParsedDelta delta = choice.splitter->Feed(chunk.text, last);
  Json logprobs;
  if (logprobs_ >= 0 && !chunk.logprobs.empty()) {
    Json content = ChatLogprobs(chunk.logprobs);
    for (const Json& entry : content) choice.logprobs.push_back(entry);
    logprobs = {{"content", std::move(content)}};
  }
  std::string finish;
  if (last) {
    choice.finish_reason =
        ChatFinishReason(OpenAiFinishReason(*chunk.finish_reason), choice.splitter->tools());
    finish = choice.finish_reason;
    prompt_tokens_ = chunk.prompt_tokens;
    cached_tokens_ = chunk.cached_prompt_tokens;
    completion_tokens_ += chunk.completion_tokens;
  }
  Json body = Json::object();
  if (!delta.reasoning.empty()) body["reasoning_content"] = delta.reasoning;
  if (!delta.content.empty()) body["content"] = delta.content;
  if (!delta.tool_calls.empty()) body["tool_calls"] = ToolCallDeltas(delta.tool_calls);
  const bool ids = return_token_ids_ && !chunk.token_ids.empty();
  if (body.empty() && logprobs.is_null() && finish.empty() && !ids) return events;
  Json event = Event(chunk.index, std::move(body), logprobs, finish);
  if (return_token_ids_) event["choices"][0]["token_ids"] = chunk.token_ids;
  events.push_back(Dump(event));
  return events;
}

Json ChatOutput::Usage() const {
  return {{"prompt_tokens", prompt_tokens_},
          {"completion_tokens", completion_tokens_},
          {"total_tokens", prompt_tokens_ + completion_tokens_},
          {"prompt_tokens_details", {{"cached_tokens", cached_tokens_}}}};
}

std::string ChatOutput::UsageEvent() const {
  return Dump({{"id", identity_.id},
               {"object", "chat.completion.chunk"},
               {"created", identity_.created},
               {"model", identity_.model},
               {"choices", Json::array()},
               {"usage", Usage()}});
}

std::string ChatOutput::Body() const {
  Json choices = Json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    Json message = {{"role", "assistant"}};
    const ParsedDelta& whole = c.splitter->whole();
    message["content"] =
        whole.content.empty() && c.splitter->made_tool_calls() ? Json() : Json(whole.content);
    message["reasoning_content"] = whole.reasoning.empty() ? Json() : Json(whole.reasoning);
    Json calls = Json::array();
    if (c.splitter->tools() != nullptr) {
      for (const ParsedToolCall& call : c.splitter->tools()->calls()) {
        calls.push_back({{"id", call.id},
                         {"type", "function"},
                         {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
      }
    }
    message["tool_calls"] = std::move(calls);
    Json entry = {{"index", i},
                  {"message", std::move(message)},
                  {"logprobs", logprobs_ >= 0 ? Json{{"content", c.logprobs}} : Json()},
                  {"finish_reason", c.finish_reason.empty() ? Json() : Json(c.finish_reason)}};
    if (return_token_ids_) entry["token_ids"] = c.token_ids;
    choices.push_back(std::move(entry));
  }
  return Dump({{"id", identity_.id},
               {"object", "chat.completion"},
               {"created", identity_.created},
               {"model", identity_.model},
               {"choices", std::move(choices)},
               {"usage", Usage()}});
}

}  // namespace tpserve
