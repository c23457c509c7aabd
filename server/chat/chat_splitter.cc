#include "server/chat/chat_splitter.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "base/status_macros.h"

namespace tpserve {

bool PromptOpensThinking(absl::string_view prompt) {
  return absl::EndsWith(absl::StripTrailingAsciiWhitespace(prompt), "<think>");
}

absl::StatusOr<std::unique_ptr<ChatSplitter>> ChatSplitter::Create(const ChatParsing& parsing) {
  std::unique_ptr<ChatSplitter> out(new ChatSplitter());
  if (!parsing.reasoning_parser.empty() && parsing.forced_tool_prefix.empty()) {
    TPSERVE_ASSIGN_OR_RETURN(out->reasoning_, ReasoningParser::Create(
                                                  parsing.reasoning_parser,
                                                  parsing.prompt_opened_thinking));
  }
  if (!parsing.tool_parser.empty()) {
    TPSERVE_ASSIGN_OR_RETURN(out->tools_,
                             ToolCallParser::Create(parsing.tool_parser, parsing.tool_call_ids));
    // Only the opening of a call: nothing to release yet.
    if (!parsing.forced_tool_prefix.empty()) out->tools_->Feed(parsing.forced_tool_prefix);
  }
  return out;
}

ParsedDelta ChatSplitter::Feed(absl::string_view text, bool finish) {
  ParsedDelta split;
  if (reasoning_ != nullptr) {
    split = reasoning_->Feed(text);
    if (finish) split.Append(reasoning_->Finish());
  } else {
    split.content = std::string(text);
  }
  ParsedDelta out;
  out.reasoning = std::move(split.reasoning);
  if (tools_ != nullptr) {
    ParsedDelta calls = tools_->Feed(split.content);
    if (finish) calls.Append(tools_->Finish());
    out.content = std::move(calls.content);
    out.tool_calls = std::move(calls.tool_calls);
  } else {
    out.content = std::move(split.content);
  }
  whole_.Append(out);
  return out;
}

}  // namespace tpserve
