// ReasoningParser: splits a model's answer, as it streams, into reasoning text (the
// <think>...</think> part) and content, as vLLM's --reasoning-parser does.
//
//   qwen3:       a <think> at the very start of the output opens reasoning; without it
//                the whole output is content, unless prompt_opened_thinking.
//   deepseek_r1: the template opens the thinking, so the output up to </think> is
//                reasoning whether or not it starts with <think> (then stripped).
// In both, </think> ends the reasoning and the rest is content; if it never comes,
// everything after the opening is reasoning. The tags are stripped; the newlines the
// models put around them are kept, as vLLM keeps them. A second <think> or </think>
// after the first is ordinary text.
//
// Held back: at most a tag's length of text that might be a tag. Pieces concatenate to
// the same reasoning and content however the text was split into deltas.
//
// Chaining with tool calls: the caller feeds each delta here first and passes the
// returned content (only) to ToolCallParser::Feed, then does the same with Finish:
//   ParsedDelta r = reasoning->Feed(delta);
//   ParsedDelta t = tools->Feed(r.content);
//   send {content: t.content, reasoning: r.reasoning, tool_calls: t.tool_calls}
//
// One instance per choice; not thread-safe. Feed after Finish is not allowed.
#ifndef TPSERVE_SERVER_CHAT_REASONING_PARSER_H_
#define TPSERVE_SERVER_CHAT_REASONING_PARSER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/chat/tool_call_parser.h"

namespace tpserve {

class ReasoningParser {
 public:
  // name: one of ReasoningParserNames(). prompt_opened_thinking: the rendered prompt
  // ends inside <think> (the template added "<think>\n"), so the output starts as
  // reasoning.
  static absl::StatusOr<std::unique_ptr<ReasoningParser>> Create(absl::string_view name,
                                                                 bool prompt_opened_thinking);
  virtual ~ReasoningParser() = default;

  // Adds the next text delta; returns the reasoning and content releasable now.
  virtual ParsedDelta Feed(absl::string_view text) = 0;
  // The stream ended: releases whatever was held back.
  virtual ParsedDelta Finish() = 0;
};

// Accepted names, for --reasoning-parser.
const std::vector<std::string>& ReasoningParserNames();
// InvalidArgument naming the accepted names unless name is one of them.
absl::Status ValidReasoningParserName(absl::string_view name);

}  // namespace tpserve

#endif  // TPSERVE_SERVER_CHAT_REASONING_PARSER_H_
