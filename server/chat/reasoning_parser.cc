#include "server/chat/reasoning_parser.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tpserve {
namespace {

constexpr absl::string_view kThinkOpen = "<think>";
constexpr absl::string_view kThinkClose = "</think>";

// <think>reasoning</think>content, where the output may start past the <think>.
class ThinkTagParser final : public ReasoningParser {
 public:
  // starts_in_reasoning: an output without a leading <think> is still reasoning.
  explicit ThinkTagParser(bool starts_in_reasoning)
      : starts_in_reasoning_(starts_in_reasoning) {}

  ParsedDelta Feed(absl::string_view text) override {
    held_.append(text.data(), text.size());
    ParsedDelta out;
    if (state_ == State::kStart) DecideStart();
    if (state_ == State::kReasoning) ReleaseReasoning(out);
    if (state_ == State::kContent) {
      out.content = std::move(held_);
      held_.clear();
    }
    return out;
  }

  ParsedDelta Finish() override {
    ParsedDelta out;
    const bool reasoning = state_ == State::kReasoning ||
                           (state_ == State::kStart && starts_in_reasoning_);
    (reasoning ? out.reasoning : out.content) = std::move(held_);
    held_.clear();
    return out;
  }

 private:
  // kStart: held_ is a proper prefix of <think>. kReasoning: held_ may start a
  // </think>. kContent: nothing is held.
  enum class State { kStart, kReasoning, kContent };

  void DecideStart() {
    if (absl::StartsWith(held_, kThinkOpen)) {
      held_.erase(0, kThinkOpen.size());
      state_ = State::kReasoning;
    } else if (!absl::StartsWith(kThinkOpen, held_)) {
      state_ = starts_in_reasoning_ ? State::kReasoning : State::kContent;
    }
  }

  void ReleaseReasoning(ParsedDelta& out) {
    const size_t close = absl::string_view(held_).find(kThinkClose);
    if (close == std::string::npos) {
      const size_t release = held_.size() - PartialTagLength(held_, kThinkClose);
      out.reasoning.append(held_, 0, release);
      held_.erase(0, release);
      return;
    }
    out.reasoning.append(held_, 0, close);
    held_.erase(0, close + kThinkClose.size());
    state_ = State::kContent;
  }

  const bool starts_in_reasoning_;
  State state_ = State::kStart;
  std::string held_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ReasoningParser>> ReasoningParser::Create(
    absl::string_view name, bool prompt_opened_thinking) {
  if (absl::Status valid = ValidReasoningParserName(name); !valid.ok()) return valid;
  // DeepSeek-R1's templates always open the thinking, so its output starts inside it.
  const bool starts_in_reasoning = name == "deepseek_r1" || prompt_opened_thinking;
  return std::make_unique<ThinkTagParser>(starts_in_reasoning);
}

const std::vector<std::string>& ReasoningParserNames() {
  static const auto* const kNames = new std::vector<std::string>{"deepseek_r1", "qwen3"};
  return *kNames;
}

absl::Status ValidReasoningParserName(absl::string_view name) {
  for (const std::string& known : ReasoningParserNames()) {
    if (name == known) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown reasoning parser \"", name,
                                                 "\"; accepted: ",
                                                 absl::StrJoin(ReasoningParserNames(), ", ")));
}

}  // namespace tpserve
