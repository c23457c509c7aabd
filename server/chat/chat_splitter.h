// ChatSplitter: one chat choice's answer split, as it streams, into content, reasoning
// and tool calls — the reasoning parser first, then the tool-call parser on the content
// it leaves (reasoning_parser.h), each optional. Both the OpenAI-compatible API and the
// gRPC Chat RPC use it. One per choice; not thread-safe.
#ifndef TPSERVE_SERVER_CHAT_CHAT_SPLITTER_H_
#define TPSERVE_SERVER_CHAT_CHAT_SPLITTER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/chat/reasoning_parser.h"
#include "server/chat/tool_call_parser.h"

namespace tpserve {

// How a chat answer is split: which parsers, and whether the prompt opened the model's
// thinking.
struct ChatParsing {
  std::string reasoning_parser;  // "" for none
  std::string tool_parser;       // "" for none (tool_choice "none", or no tools)
  bool prompt_opened_thinking = false;
  IdGenerator tool_call_ids;     // null: random
  // The prompt ends with the opening of a tool call (ForcedToolCallPrefix): the tool
  // parser reads it before the model's text, and no reasoning parser runs (the answer
  // starts inside the call, not in thought).
  std::string forced_tool_prefix;
};

// Whether a rendered prompt ends inside <think> (the template opened the model's
// thinking, as DeepSeek-R1's and Qwen3's with thinking on do).
bool PromptOpensThinking(absl::string_view prompt);

class ChatSplitter {
 public:
  // An unknown parser name is INVALID_ARGUMENT.
  static absl::StatusOr<std::unique_ptr<ChatSplitter>> Create(const ChatParsing& parsing);

  // The next text delta (and, when `finish`, the end of the answer): what can be
  // released now.
  ParsedDelta Feed(absl::string_view text, bool finish);

  // Everything released so far, and the tool calls parsed.
  const ParsedDelta& whole() const { return whole_; }
  bool has_reasoning_parser() const { return reasoning_ != nullptr; }
  const ToolCallParser* tools() const { return tools_.get(); }
  bool made_tool_calls() const { return tools_ != nullptr && !tools_->calls().empty(); }

 private:
  ChatSplitter() = default;

  std::unique_ptr<ReasoningParser> reasoning_;
  std::unique_ptr<ToolCallParser> tools_;
  ParsedDelta whole_;
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_CHAT_CHAT_SPLITTER_H_
