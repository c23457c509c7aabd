// The OpenAI-compatible API's request bodies (POST /v1/completions and
// /v1/chat/completions) read into tpserve's own request: the fields as OpenAI defines
// them, vLLM's extra sampling fields, and the chat template's inputs.
//
// Every rule broken is INVALID_ARGUMENT carrying the parameter (openai_error.h), e.g.
// param "top_logprobs": "top_logprobs must be an integer in [0, 20], got 25". Unknown
// fields are ignored, as OpenAI's servers do; fields tpserve knows but cannot honour
// (logit_bias, suffix, a response_format other than text, best_of ≠ n, min_tokens,
// a request's own chat_template, non-text message parts) are refused naming them rather
// than silently dropped. Ranges the core checks again (sampling_limits.h) are checked
// here first so that the error names OpenAI's parameter; RewriteCoreError renames the
// core's field names for what it alone finds (context length, vocabulary).
//
// Key order: bodies are parsed as nlohmann::ordered_json, so messages and tool
// definitions reach the chat template (and its tojson) in the client's order, as Python
// would have them. Pure; any thread.
#ifndef TPSERVE_SERVER_OPENAI_OPENAI_REQUEST_H_
#define TPSERVE_SERVER_OPENAI_OPENAI_REQUEST_H_

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/chat/chat_config.h"
#include "server/chat/chat_splitter.h"
#include "tpserve/v1/inference.pb.h"

namespace tpserve {

using OrderedJson = nlohmann::ordered_json;

// The largest request body a JSON parse is attempted on is the HTTP server's bound; this
// bounds the nesting of what is parsed (a deeper document is refused, not recursed).
inline constexpr int kMaxJsonDepth = 64;

// Parses a request body: malformed JSON, a non-object, or nesting deeper than
// kMaxJsonDepth is INVALID_ARGUMENT (the message says where).
absl::StatusOr<OrderedJson> ParseRequestBody(absl::string_view body);

// What both endpoints share once read.
struct OpenAiCommon {
  std::string model;  // as sent; "" when absent
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  std::string user;
  std::string request_id;  // vLLM's request_id field, else the X-Request-Id header
  // vLLM's return_token_ids: each choice also carries its generated token ids.
  bool return_token_ids = false;
};

struct CompletionRequest {
  OpenAiCommon common;
  // One per prompt (a list of prompts is several), each with its sampling; the choice of
  // prompt p, completion j is index p × n + j.
  std::vector<v1::GenerateRequest> prompts;
  int n = 1;
  bool echo = false;  // the prompt's text comes before each completion's
  int logprobs = -1;  // alternatives per token in the completions format; -1: none
};

enum class ToolChoice { kNone, kAuto, kRequired, kNamed };

struct ChatRequest {
  OpenAiCommon common;
  // Sampling and the rest; the prompt (text) is set once the messages are rendered.
  v1::GenerateRequest generate;
  // The chat template's inputs, as transformers' apply_chat_template takes them:
  // messages with text content (parts joined) and tool-call arguments as objects.
  OrderedJson messages = OrderedJson::array();
  OrderedJson tools;      // an array, or null
  OrderedJson documents;  // an array, or null
  OrderedJson template_kwargs = OrderedJson::object();  // chat_template_kwargs
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  ToolChoice tool_choice = ToolChoice::kNone;  // kAuto when tools are given and none asked
  std::string named_tool;                      // kNamed: the function
  bool logprobs = false;
  int top_logprobs = 0;
};

// `served_model`: a `model` other than it (or "") is NOT_FOUND naming both.
absl::StatusOr<CompletionRequest> ReadCompletionRequest(const OrderedJson& body,
                                                        absl::string_view served_model);
absl::StatusOr<ChatRequest> ReadChatRequest(const OrderedJson& body,
                                            absl::string_view served_model);

// A chat ready to generate: the messages rendered into the prompt text, and how its
// answers are to be split.
struct PreparedChat {
  v1::GenerateRequest generate;
  ChatParsing parsing;
  int choices = 1;
};

// Renders `request` with config's template. tool_choice "required" or a named function
// ends the prompt with the opening of a call (ForcedToolCallPrefix) so that the answer is
// one: there is no constrained decoding, so a model can still write a call that does not
// parse (then it is content). INVALID_ARGUMENT (param "messages") when the
// model has no template or the template fails on these messages (its message kept);
// (param "tool_choice") when tools are to be parsed but no --tool-call-parser is set.
absl::StatusOr<PreparedChat> PrepareChat(ChatRequest request, const ChatConfig& config);

// The core's validation speaks tpserve.v1's field names ("sampling.top_p", "text",
// "token_ids.ids"); this renames them to the endpoint's parameters and attaches the
// parameter. `chat`: the chat endpoint's names (top_logprobs, messages).
absl::Status RewriteCoreError(const absl::Status& status, bool chat);

}  // namespace tpserve

#endif  // TPSERVE_SERVER_OPENAI_OPENAI_REQUEST_H_
