// Tool call formats, as vLLM's parsers of the same names read them:
//   hermes (Qwen2.5, Qwen3, Hermes 2 Pro):
//     content <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call> ...
//     A </tool_call> inside a JSON string does not close the call. Whitespace between
//     or after calls is dropped; other text before, between or after them is content.
//     An unclosed call at the end is still a call if its body is a valid one.
//   llama3_json (Llama 3.1-3.3; also "llama4_json"):
//     [<|python_tag|>] {"name": "f", "parameters": {...}}; {...}
//     Only an answer that starts (after whitespace, or after <|python_tag|>, which is
//     dropped) with '{' holds calls; any other answer is plain content. Separators
//     (';', whitespace) between calls are dropped; text after the calls is content.
// A call object needs a non-empty string "name"; its arguments are the "arguments" or
// else "parameters" member, which must be an object (missing or null means "{}").
#include "server/chat/tool_call_parser.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include <nlohmann/json.hpp>

namespace tpserve {
namespace {

constexpr absl::string_view kWhitespace = " \t\r\n";

// Where the scan of JSON text stands: inside a string or not, and bracket depth.
// Bytes are enough: the characters that matter are ASCII, never inside a UTF-8
// sequence.
class JsonLexState {
 public:
  void Step(char c) {
    if (in_string_) {
      if (escaped_) {
        escaped_ = false;
      } else if (c == '\\') {
        escaped_ = true;
      } else if (c == '"') {
        in_string_ = false;
      }
      return;
    }
    if (c == '"') {
      in_string_ = true;
    } else if (c == '{' || c == '[') {
      ++depth_;
    } else if (c == '}' || c == ']') {
      --depth_;
    }
  }
  bool in_string() const { return in_string_; }
  int depth() const { return depth_; }

 private:
  bool in_string_ = false;
  bool escaped_ = false;
  int depth_ = 0;
};

// End of the JSON value that starts at text[begin], in text already known valid.
size_t SkipValue(absl::string_view text, size_t begin) {
  const char first = text[begin];
  if (first == '"' || first == '{' || first == '[') {
    JsonLexState lex;
    for (size_t i = begin; i < text.size(); ++i) {
      lex.Step(text[i]);
      if (!lex.in_string() && lex.depth() == 0) return i + 1;
    }
    return text.size();
  }
  const size_t end = text.find_first_of(",}] \t\r\n", begin);
  return end == absl::string_view::npos ? text.size() : end;
}

size_t SkipWhitespace(absl::string_view text, size_t i) {
  const size_t next = text.find_first_not_of(kWhitespace, i);
  return next == absl::string_view::npos ? text.size() : next;
}

// The raw text of the last top-level member spelled "key" of a valid JSON object.
std::optional<absl::string_view> RawMember(absl::string_view object, absl::string_view key) {
  const std::string quoted = absl::StrCat("\"", key, "\"");
  std::optional<absl::string_view> found;
  size_t i = SkipWhitespace(object, 1);
  while (i < object.size() && object[i] == '"') {
    const size_t key_end = SkipValue(object, i);
    const bool match = object.substr(i, key_end - i) == quoted;
    const size_t value = SkipWhitespace(object, SkipWhitespace(object, key_end) + 1);
    const size_t value_end = SkipValue(object, value);
    if (match) found = object.substr(value, value_end - value);
    i = SkipWhitespace(object, value_end);
    if (i < object.size() && object[i] == ',') i = SkipWhitespace(object, i + 1);
  }
  return found;
}

struct CallText {
  std::string name;
  std::string arguments;
};

// The call in text, or nullopt when text is not a valid call object.
std::optional<CallText> ParseCall(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  const nlohmann::json doc = nlohmann::json::parse(text.begin(), text.end(), nullptr,
                                                   /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return std::nullopt;
  const auto name = doc.find("name");
  if (name == doc.end() || !name->is_string() || name->get_ref<const std::string&>().empty()) {
    return std::nullopt;
  }
  const char* key = doc.contains("arguments")    ? "arguments"
                    : doc.contains("parameters") ? "parameters"
                                                 : nullptr;
  CallText call{name->get<std::string>(), "{}"};
  if (key == nullptr || doc[key].is_null()) return call;
  if (!doc[key].is_object()) return std::nullopt;
  // The model's own text; a key spelled with escapes is not found raw, so dump it.
  const std::optional<absl::string_view> raw = RawMember(text, key);
  call.arguments = raw ? std::string(*raw) : doc[key].dump();
  return call;
}

class HermesParser final : public ToolCallParser {
 public:
  explicit HermesParser(IdGenerator ids) : ToolCallParser(std::move(ids)) {}

  ParsedDelta Feed(absl::string_view text) override {
    held_.append(text.data(), text.size());
    ParsedDelta out;
    while (Step(out)) {
    }
    return out;
  }

  ParsedDelta Finish() override {
    ParsedDelta out;
    if (state_ == State::kBody) {
      EndBody(held_, /*closed=*/false, out);
    } else if (state_ == State::kContent ||
               absl::string_view(held_).find_first_not_of(kWhitespace) != std::string::npos) {
      out.content = std::move(held_);
    }
    held_.clear();
    return out;
  }

 private:
  static constexpr absl::string_view kOpen = "<tool_call>";
  static constexpr absl::string_view kClose = "</tool_call>";
  // kContent: held_ may start a <tool_call>. kBody: held_ is the body after it.
  // kAfterCall: held_ is whitespace after a call, dropped if another call follows.
  enum class State { kContent, kBody, kAfterCall };

  // Makes one move on held_; false when it needs more text.
  bool Step(ParsedDelta& out) {
    switch (state_) {
      case State::kContent:
        return StepContent(out);
      case State::kBody:
        return StepBody(out);
      case State::kAfterCall:
        return StepAfterCall(out);
    }
    return false;
  }

  bool StepContent(ParsedDelta& out) {
    const size_t open = absl::string_view(held_).find(kOpen);
    if (open == std::string::npos) {
      const size_t release = held_.size() - PartialTagLength(held_, kOpen);
      out.content.append(held_, 0, release);
      held_.erase(0, release);
      return false;
    }
    out.content.append(held_, 0, open);
    held_.erase(0, open + kOpen.size());
    state_ = State::kBody;
    lex_ = JsonLexState();
    scanned_ = 0;
    return true;
  }

  bool StepBody(ParsedDelta& out) {
    for (; scanned_ < held_.size(); ++scanned_) {
      if (scanned_ >= kMaxToolCallBytes) {
        absl::StrAppend(&out.content, kOpen, absl::string_view(held_).substr(0, scanned_));
        held_.erase(0, scanned_);
        state_ = State::kContent;
        return true;
      }
      const char c = held_[scanned_];
      if (c == '<' && !lex_.in_string()) {
        const absl::string_view rest = absl::string_view(held_).substr(scanned_);
        if (absl::StartsWith(rest, kClose)) {
          const std::string body = held_.substr(0, scanned_);
          held_.erase(0, scanned_ + kClose.size());
          EndBody(body, /*closed=*/true, out);
          return true;
        }
        if (absl::StartsWith(kClose, rest)) return false;
      }
      lex_.Step(c);
    }
    return false;
  }

  bool StepAfterCall(ParsedDelta& out) {
    const size_t text = absl::string_view(held_).find_first_not_of(kWhitespace);
    const size_t spaces = text == std::string::npos ? held_.size() : text;
    if (spaces > kMaxToolCallBytes) {
      out.content.append(held_, 0, spaces);
      held_.erase(0, spaces);
      state_ = State::kContent;
      return true;
    }
    if (text == std::string::npos) return false;
    const absl::string_view rest = absl::string_view(held_).substr(text);
    if (absl::StartsWith(rest, kOpen)) {
      held_.erase(0, text);
    } else if (absl::StartsWith(kOpen, rest)) {
      return false;
    }
    state_ = State::kContent;
    return true;
  }

  // A body that is not a valid call goes out as content with its tags.
  void EndBody(absl::string_view body, bool closed, ParsedDelta& out) {
    if (std::optional<CallText> call = ParseCall(body)) {
      EmitCall(std::move(call->name), std::move(call->arguments), out);
      state_ = State::kAfterCall;
      return;
    }
    absl::StrAppend(&out.content, kOpen, body, closed ? kClose : "");
    state_ = State::kContent;
  }

  State state_ = State::kContent;
  std::string held_;
  JsonLexState lex_;  // over held_[0, scanned_) in kBody
  size_t scanned_ = 0;
};

class Llama3JsonParser final : public ToolCallParser {
 public:
  explicit Llama3JsonParser(IdGenerator ids) : ToolCallParser(std::move(ids)) {}

  ParsedDelta Feed(absl::string_view text) override {
    held_.append(text.data(), text.size());
    ParsedDelta out;
    while (Step(out)) {
    }
    return out;
  }

  ParsedDelta Finish() override {
    ParsedDelta out;
    if (state_ == State::kObject) {
      EndObject(held_, out);  // unbalanced, so content
    } else if (state_ != State::kBetween) {
      out.content = std::move(held_);
    }
    held_.clear();
    return out;
  }

 private:
  static constexpr absl::string_view kPythonTag = "<|python_tag|>";
  static constexpr absl::string_view kSeparators = " \t\r\n;";
  // kStart: nothing decided. kBetween: held_ is separators after a call (or the
  // opening). kObject: held_ is a call object being read. kContent: plain text.
  enum class State { kStart, kBetween, kObject, kContent };

  bool Step(ParsedDelta& out) {
    switch (state_) {
      case State::kStart:
        return StepStart();
      case State::kBetween:
        return StepBetween();
      case State::kObject:
        return StepObject(out);
      case State::kContent:
        out.content.append(held_);
        held_.clear();
        return false;
    }
    return false;
  }

  bool StepStart() {
    const size_t lead = absl::string_view(held_).find_first_not_of(kWhitespace);
    if (lead == std::string::npos) return GiveUpIfOver(held_.size());
    const absl::string_view rest = absl::string_view(held_).substr(lead);
    if (absl::StartsWith(rest, kPythonTag)) {
      held_.erase(0, lead + kPythonTag.size());
      state_ = State::kBetween;
    } else if (absl::StartsWith(kPythonTag, rest)) {
      return GiveUpIfOver(held_.size());
    } else if (rest.front() == '{') {
      held_.erase(0, lead);
      state_ = State::kBetween;
    } else {
      state_ = State::kContent;
    }
    return true;
  }

  bool StepBetween() {
    const size_t next = absl::string_view(held_).find_first_not_of(kSeparators);
    if (next == std::string::npos) return GiveUpIfOver(held_.size());
    if (held_[next] == '{') {
      held_.erase(0, next);
      state_ = State::kObject;
      lex_ = JsonLexState();
      scanned_ = 0;
    } else {
      state_ = State::kContent;
    }
    return true;
  }

  bool StepObject(ParsedDelta& out) {
    for (; scanned_ < held_.size(); ++scanned_) {
      if (scanned_ >= kMaxToolCallBytes) return GiveUpIfOver(scanned_ + 1);
      lex_.Step(held_[scanned_]);
      if (lex_.depth() == 0 && !lex_.in_string()) {
        const std::string object = held_.substr(0, scanned_ + 1);
        held_.erase(0, scanned_ + 1);
        EndObject(object, out);
        return true;
      }
    }
    return false;
  }

  // Held text longer than the limit is not a call: it and the rest of the answer are
  // plain content (kContent releases them). True when it gave up.
  bool GiveUpIfOver(size_t held) {
    if (held <= kMaxToolCallBytes) return false;
    state_ = State::kContent;
    return true;
  }

  // An object that is not a valid call ends the calls: it and the rest are content.
  void EndObject(absl::string_view object, ParsedDelta& out) {
    if (std::optional<CallText> call = ParseCall(object)) {
      EmitCall(std::move(call->name), std::move(call->arguments), out);
      state_ = State::kBetween;
      return;
    }
    out.content.append(object.data(), object.size());
    state_ = State::kContent;
  }

  State state_ = State::kStart;
  std::string held_;
  JsonLexState lex_;  // over held_[0, scanned_) in kObject
  size_t scanned_ = 0;
};

}  // namespace

// Length of the longest suffix of text that is a proper prefix of tag.
size_t PartialTagLength(absl::string_view text, absl::string_view tag) {
  for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n) {
    if (absl::EndsWith(text, tag.substr(0, n))) return n;
  }
  return 0;
}

void ParsedDelta::Append(ParsedDelta other) {
  content += other.content;
  reasoning += other.reasoning;
  for (ToolCallDelta& call : other.tool_calls) tool_calls.push_back(std::move(call));
}

IdGenerator RandomToolCallIds() {
  std::random_device device;
  auto engine = std::make_shared<std::mt19937_64>(
      (static_cast<uint64_t>(device()) << 32) ^ device());
  return [engine] {
    static constexpr absl::string_view kAlphabet =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    std::uniform_int_distribution<size_t> pick(0, kAlphabet.size() - 1);
    std::string id = "call_";
    for (int i = 0; i < 24; ++i) id += kAlphabet[pick(*engine)];
    return id;
  };
}

ToolCallParser::ToolCallParser(IdGenerator ids)
    : ids_(ids ? std::move(ids) : RandomToolCallIds()) {}

void ToolCallParser::EmitCall(std::string name, std::string arguments, ParsedDelta& out) {
  const int index = static_cast<int>(calls_.size());
  calls_.push_back(ParsedToolCall{ids_(), std::move(name), std::move(arguments)});
  const ParsedToolCall& call = calls_.back();
  out.tool_calls.push_back(ToolCallDelta{index, call.id, call.name, ""});
  out.tool_calls.push_back(ToolCallDelta{index, "", "", call.arguments});
}

absl::StatusOr<std::unique_ptr<ToolCallParser>> ToolCallParser::Create(absl::string_view name,
                                                                        IdGenerator ids) {
  if (absl::Status valid = ValidToolParserName(name); !valid.ok()) return valid;
  if (name == "hermes") return std::make_unique<HermesParser>(std::move(ids));
  return std::make_unique<Llama3JsonParser>(std::move(ids));
}

std::string ForcedToolCallPrefix(absl::string_view name, const std::string* function) {
  // Hermes wraps the object in tags and calls the arguments "arguments"; the Llama JSON
  // formats are the bare object, with "parameters" as Llama 3.1's template shows them.
  const bool hermes = name == "hermes";
  std::string out = hermes ? "<tool_call>\n{\"name\": \"" : "{\"name\": \"";
  if (function == nullptr) return out;
  const std::string quoted = nlohmann::json(*function).dump(-1, ' ', false,
                                                            nlohmann::json::error_handler_t::replace);
  out.resize(out.size() - 1);  // the name's own quotes come from the JSON dump
  absl::StrAppend(&out, quoted, hermes ? ", \"arguments\": " : ", \"parameters\": ");
  return out;
}

const std::vector<std::string>& ToolParserNames() {
  static const auto* const kNames =
      new std::vector<std::string>{"hermes", "llama3_json", "llama4_json"};
  return *kNames;
}

absl::Status ValidToolParserName(absl::string_view name) {
  for (const std::string& known : ToolParserNames()) {
    if (name == known) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown tool call parser \"", name,
                                                 "\"; accepted: ",
                                                 absl::StrJoin(ToolParserNames(), ", ")));
}

std::string ChatFinishReason(absl::string_view engine_reason, const ToolCallParser* tools) {
  if (tools != nullptr && !tools->calls().empty()) return "tool_calls";
  return std::string(engine_reason);
}

}  // namespace tpserve
