// The OpenAI-compatible API's answers, built from the engine's chunks of one request:
// CompletionOutput for /v1/completions ("text_completion" objects) and ChatOutput for
// /v1/chat/completions ("chat.completion" and "chat.completion.chunk").
//
// Both take every EngineChunk of the request's choices (EngineChunk.index is the choice
// index, prompt p × n + completion j) in order. Streaming, Feed returns the server-sent
// events' data (JSON texts) that the chunk produces; UsageEvent is the last one when
// stream_options.include_usage is set. Not streaming, Body is the whole response once
// every choice finished. Usage counts each prompt once and every choice's completion.
//
// Mappings: finish_reason "length" (max_tokens or the context), "stop" (EOS, a stop
// string or id), "tool_calls" (the chat choice made a tool call), "abort" (the server's
// drain ended it, as vLLM names it). Logprobs follow each endpoint's format: chat's
// {"content": [{"token", "logprob", "bytes", "top_logprobs"}]}; completions'
// {"tokens", "token_logprobs", "top_logprobs", "text_offset"}, offsets in code points.
// A logprob of -inf is -9999.0 (JSON has no infinity), as vLLM sends it.
//
// One instance per request; not thread-safe (the request's sink serialises its calls).
#ifndef TPSERVE_SERVER_OPENAI_OPENAI_RESPONSE_H_
#define TPSERVE_SERVER_OPENAI_OPENAI_RESPONSE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/chat/chat_splitter.h"
#include "server/request.h"

namespace tpserve {

// What every object of one response repeats.
struct ResponseIdentity {
  std::string id;  // "cmpl-…" or "chatcmpl-…"
  int64_t created = 0;  // Unix seconds
  std::string model;
};

// A fresh id: `prefix` + 32 random hex digits.
std::string NewResponseId(absl::string_view prefix);

class CompletionOutput {
 public:
  // `prompts` × `n` choices; `logprobs`: alternatives per token, -1 for none; `echo`:
  // per prompt, the text put before its choices' completions ("" for none).
  CompletionOutput(ResponseIdentity identity, int prompts, int n, int logprobs,
                   std::vector<std::string> echo, bool include_usage);

  std::vector<std::string> Feed(const EngineChunk& chunk);
  std::string UsageEvent() const;
  std::string Body() const;
  // vLLM's return_token_ids: every choice (and streamed chunk) lists its token ids.
  void set_return_token_ids(bool on) { return_token_ids_ = on; }

 private:
  struct Choice {
    std::vector<int32_t> token_ids;
    std::string text;
    nlohmann::json logprobs;  // the format's object; null without logprobs
    int64_t offset = 0;       // code points of text so far
    std::string finish_reason;
    bool started = false;
  };
  nlohmann::json Logprobs(const std::vector<PositionLogprobs>& positions, Choice& choice) const;
  nlohmann::json Usage() const;

  const ResponseIdentity identity_;
  const int n_;
  const int logprobs_;
  const std::vector<std::string> echo_;
  const bool include_usage_;
  std::vector<Choice> choices_;
  std::vector<int> prompt_tokens_;  // per prompt, once one of its choices finished
  std::vector<int> cached_tokens_;
  int completion_tokens_ = 0;
  bool return_token_ids_ = false;
};

class ChatOutput {
 public:
  // `logprobs`: -1 for none, else top_logprobs per token.
  static absl::StatusOr<std::unique_ptr<ChatOutput>> Create(ResponseIdentity identity,
                                                            int choices, int logprobs,
                                                            const ChatParsing& parsing,
                                                            bool include_usage);

  std::vector<std::string> Feed(const EngineChunk& chunk);
  std::string UsageEvent() const;
  std::string Body() const;
  void set_return_token_ids(bool on) { return_token_ids_ = on; }

 private:
  struct Choice {
    std::vector<int32_t> token_ids;
    std::unique_ptr<ChatSplitter> splitter;
    nlohmann::json logprobs = nlohmann::json::array();
    std::string finish_reason;
    bool started = false;  // the role's chunk was sent
  };
  ChatOutput(ResponseIdentity identity, int logprobs, bool include_usage)
      : identity_(std::move(identity)), logprobs_(logprobs), include_usage_(include_usage) {}
  nlohmann::json Event(int index, nlohmann::json delta, const nlohmann::json& logprobs,
                       const std::string& finish_reason) const;
  nlohmann::json Usage() const;

  const ResponseIdentity identity_;
  const int logprobs_;
  const bool include_usage_;
  std::vector<Choice> choices_;
  int prompt_tokens_ = 0;
  int cached_tokens_ = 0;
  int completion_tokens_ = 0;
  bool return_token_ids_ = false;
};

// Engine finish reasons as the API names them.
std::string OpenAiFinishReason(FinishReason reason);

}  // namespace tpserve

#endif  // TPSERVE_SERVER_OPENAI_OPENAI_RESPONSE_H_
