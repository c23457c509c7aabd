// ToolCallParser: splits a model's answer, as it streams, into plain content and
// OpenAI-style tool calls, in the formats of vLLM's --tool-call-parser.
//
// The chat edge feeds each text delta of one choice in order and sends what comes back;
// Finish() flushes at the end of the stream. Formats ("hermes", "llama3_json") are
// described in tool_call_parser.cc. Contract shared by every format:
//   - Text that might still turn out to be part of a tool call is held back until
//     decided: at most a tag's length of plain text, or one call's body (bounded by
//     kMaxToolCallBytes; beyond it the held text is released as content).
//   - A call is emitted when its body is complete and valid: one ToolCallDelta with
//     index, id and name (arguments empty), then one with the arguments text. The
//     arguments are the model's own text of the JSON object, so concatenating a call's
//     argument pieces gives exactly calls()[i].arguments.
//   - A body that is not a valid call (bad JSON, no name) never fails the stream: its
//     raw text, tags included, is released as content.
//   - The concatenation of everything returned depends only on the whole text, not on
//     where the deltas were split.
// When a reasoning parser is on too, the caller chains them: the reasoning parser's
// content is what goes into ToolCallParser::Feed (see reasoning_parser.h).
//
// One instance per choice; not thread-safe. Feed after Finish is not allowed.
#ifndef TPSERVE_SERVER_CHAT_TOOL_CALL_PARSER_H_
#define TPSERVE_SERVER_CHAT_TOOL_CALL_PARSER_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tpserve {

// One streamed piece of a tool call (OpenAI's choices[].delta.tool_calls[]).
struct ToolCallDelta {
  int index = 0;          // position of the call in the message, from 0
  std::string id;         // set on the call's first delta only
  std::string name;       // set on the call's first delta only
  std::string arguments;  // a piece of the arguments JSON text
};

// What one Feed/Finish releases. Reasoning parsers fill content and reasoning; tool
// call parsers fill content and tool_calls.
struct ParsedDelta {
  std::string content;
  std::string reasoning;
  std::vector<ToolCallDelta> tool_calls;

  bool empty() const { return content.empty() && reasoning.empty() && tool_calls.empty(); }
  // Appends other's pieces after this one's (accumulating a stream).
  void Append(ParsedDelta other);
};

// A finished call, as the non-streaming response lists it.
struct ParsedToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // a JSON object's text
};

// Makes tool call ids. Tests pass a deterministic one.
using IdGenerator = std::function<std::string()>;
// "call_" + 24 random alphanumerics, from an engine seeded once per generator. Copies
// share that engine, so a generator is not thread-safe: make one per parser (Create
// does when given none).
IdGenerator RandomToolCallIds();

// Length of the longest suffix of text that is a proper prefix of tag: how much a
// streaming parser holds back while waiting to see whether the tag follows.
size_t PartialTagLength(absl::string_view text, absl::string_view tag);

// A call body larger than this is not a call: it is released as content.
inline constexpr size_t kMaxToolCallBytes = size_t{1} << 20;

class ToolCallParser {
 public:
  // name: one of ToolParserNames(). ids: empty means RandomToolCallIds().
  static absl::StatusOr<std::unique_ptr<ToolCallParser>> Create(absl::string_view name,
                                                                IdGenerator ids = nullptr);
  virtual ~ToolCallParser() = default;

  // Adds the next text delta; returns what can be released now.
  virtual ParsedDelta Feed(absl::string_view text) = 0;
  // The stream ended: releases everything still held.
  virtual ParsedDelta Finish() = 0;

  // Calls parsed so far, in order.
  const std::vector<ParsedToolCall>& calls() const { return calls_; }

 protected:
  explicit ToolCallParser(IdGenerator ids);
  // Records a call and appends its two deltas to out.
  void EmitCall(std::string name, std::string arguments, ParsedDelta& out);

 private:
  IdGenerator ids_;
  std::vector<ParsedToolCall> calls_;
};

// The opening of a call in parser `name`'s format, for forcing one without constrained
// decoding: appended to the prompt (and fed to the parser before the model's text), it
// leaves the model to write the rest. With `function` (tool_choice naming one) the
// name is given and the model writes the arguments; without (tool_choice "required")
// it writes the name too. `name` must be valid (ValidToolParserName).
std::string ForcedToolCallPrefix(absl::string_view name, const std::string* function);

// Accepted names, for --tool-call-parser.
const std::vector<std::string>& ToolParserNames();
// InvalidArgument naming the accepted names unless name is one of them.
absl::Status ValidToolParserName(absl::string_view name);

// The choice's finish_reason: "tool_calls" once a call was parsed (tools may be null
// when no tool parser is on), else the engine's reason — as vLLM decides it.
std::string ChatFinishReason(absl::string_view engine_reason, const ToolCallParser* tools);

}  // namespace tpserve

#endif  // TPSERVE_SERVER_CHAT_TOOL_CALL_PARSER_H_
