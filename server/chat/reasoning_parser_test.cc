#include "server/chat/reasoning_parser.h"

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/chat/tool_call_parser.h"

namespace tpserve {
namespace {

using ::testing::HasSubstr;

struct Outcome {
  std::string reasoning;
  std::string content;
  std::vector<ParsedToolCall> calls;  // when a tool parser is chained
};

bool operator==(const Outcome& a, const Outcome& b) {
  auto same_calls = [](const std::vector<ParsedToolCall>& x,
                       const std::vector<ParsedToolCall>& y) {
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i) {
      if (x[i].name != y[i].name || x[i].arguments != y[i].arguments) return false;
    }
    return true;
  };
  return a.reasoning == b.reasoning && a.content == b.content && same_calls(a.calls, b.calls);
}

void PrintTo(const Outcome& o, std::ostream* os) {
  *os << "{reasoning: \"" << o.reasoning << "\", content: \"" << o.content << "\", "
      << o.calls.size() << " calls}";
}

// Deltas of text cut at a seeded random set of character boundaries; seed 0 is one
// character per delta, and no cut at all is the whole text.
std::vector<std::string> Deltas(const std::string& text, int seed) {
  std::mt19937 rng(seed);
  std::bernoulli_distribution cut(0.3);
  std::vector<std::string> deltas(1);
  for (size_t i = 0; i < text.size(); ++i) {
    const bool boundary = (static_cast<unsigned char>(text[i]) & 0xC0) != 0x80;
    if (i > 0 && boundary && (seed == 0 || cut(rng))) deltas.emplace_back();
    deltas.back() += text[i];
  }
  return deltas;
}

// Runs the chain the chat edge runs: reasoning first, then tool calls on its content
// (tool_format empty: no tool parser).
Outcome Run(const std::vector<std::string>& deltas, absl::string_view format,
            bool prompt_opened_thinking, absl::string_view tool_format) {
  auto reasoning = ReasoningParser::Create(format, prompt_opened_thinking);
  EXPECT_TRUE(reasoning.ok()) << reasoning.status();
  std::unique_ptr<ToolCallParser> tools;
  if (!tool_format.empty()) tools = *ToolCallParser::Create(tool_format);
  Outcome out;
  auto take = [&](const ParsedDelta& split) {
    EXPECT_TRUE(split.tool_calls.empty());
    out.reasoning += split.reasoning;
    if (tools == nullptr) {
      out.content += split.content;
      return;
    }
    out.content += tools->Feed(split.content).content;
  };
  for (const std::string& delta : deltas) take((*reasoning)->Feed(delta));
  take((*reasoning)->Finish());
  if (tools != nullptr) {
    out.content += tools->Finish().content;
    out.calls = tools->calls();
  }
  return out;
}

// The text whole, one character at a time and at random cuts must give one outcome.
Outcome ParseAllWays(const std::string& text, absl::string_view format,
                     bool prompt_opened_thinking = false, absl::string_view tool_format = "") {
  const Outcome whole = Run({text}, format, prompt_opened_thinking, tool_format);
  for (int seed = 0; seed <= 10; ++seed) {
    EXPECT_EQ(Run(Deltas(text, seed), format, prompt_opened_thinking, tool_format), whole)
        << "seed " << seed << ": " << text;
  }
  return whole;
}

TEST(Qwen3ReasoningTest, ThinkingThenAnswer) {
  const Outcome out =
      ParseAllWays("<think>\nTwo plus two.\n</think>\n\nThe answer is 4.", "qwen3");
  EXPECT_EQ(out.reasoning, "\nTwo plus two.\n");
  EXPECT_EQ(out.content, "\n\nThe answer is 4.");
}

TEST(Qwen3ReasoningTest, NoThinkTagIsAllContent) {
  for (const std::string text :
       {"The answer is 4.", "<thinking> is a tag", " <think>late</think>", "<thi", ""}) {
    const Outcome out = ParseAllWays(text, "qwen3");
    EXPECT_EQ(out.reasoning, "");
    EXPECT_EQ(out.content, text);
  }
}

TEST(Qwen3ReasoningTest, PromptOpenedThinking) {
  const Outcome out = ParseAllWays("Hmm.\n</think>\n\nFour.", "qwen3", true);
  EXPECT_EQ(out.reasoning, "Hmm.\n");
  EXPECT_EQ(out.content, "\n\nFour.");
}

TEST(Qwen3ReasoningTest, UnclosedThinkIsAllReasoning) {
  const Outcome out = ParseAllWays("<think>\nStill going </thi", "qwen3");
  EXPECT_EQ(out.reasoning, "\nStill going </thi");
  EXPECT_EQ(out.content, "");
}

TEST(Qwen3ReasoningTest, EmptyThinkingAndLaterTagsAreText) {
  const Outcome out =
      ParseAllWays("<think>\n\n</think>\n\nUse <think> and </think> tags.", "qwen3");
  EXPECT_EQ(out.reasoning, "\n\n");
  EXPECT_EQ(out.content, "\n\nUse <think> and </think> tags.");
}

TEST(Qwen3ReasoningTest, HeldTextNeverExceedsATag) {
  const std::string text = "<think>a </thin b <</think>c";
  const size_t open_end = 7;
  const size_t close_end = text.find("</think>") + 8;
  auto parser = *ReasoningParser::Create("qwen3", false);
  size_t released = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const ParsedDelta delta = parser->Feed(text.substr(i, 1));
    released += delta.reasoning.size() + delta.content.size();
    const size_t fed = i + 1;
    const size_t stripped = fed >= close_end ? 15 : fed >= open_end ? 7 : 0;
    EXPECT_LT(fed - stripped - released, std::string("</think>").size()) << i;
  }
  EXPECT_TRUE(parser->Finish().empty());
}

TEST(DeepSeekR1ReasoningTest, ReasoningWithoutAnOpeningTag) {
  for (bool opened : {false, true}) {
    const Outcome out = ParseAllWays("Let me see.\n</think>\n\nIt is 7.", "deepseek_r1", opened);
    EXPECT_EQ(out.reasoning, "Let me see.\n");
    EXPECT_EQ(out.content, "\n\nIt is 7.");
  }
}

TEST(DeepSeekR1ReasoningTest, LeadingThinkIsStripped) {
  const Outcome out = ParseAllWays("<think>\nSee.\n</think>\n\nSeven.", "deepseek_r1");
  EXPECT_EQ(out.reasoning, "\nSee.\n");
  EXPECT_EQ(out.content, "\n\nSeven.");
}

TEST(DeepSeekR1ReasoningTest, NoCloseTagMeansEverythingIsReasoning) {
  for (const std::string text : {"Thinking forever", "<thi", ""}) {
    const Outcome out = ParseAllWays(text, "deepseek_r1");
    EXPECT_EQ(out.reasoning, text);
    EXPECT_EQ(out.content, "");
  }
}

TEST(ChainedParsersTest, ThinkThenToolCall) {
  const Outcome out = ParseAllWays(
      "<think>\nNeed the weather; not <tool_call> yet.\n</think>\n\n"
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Z\u00fcrich\"}}\n"
      "</tool_call>",
      "qwen3", false, "hermes");
  EXPECT_EQ(out.reasoning, "\nNeed the weather; not <tool_call> yet.\n");
  EXPECT_EQ(out.content, "\n\n");
  ASSERT_EQ(out.calls.size(), 1u);
  EXPECT_EQ(out.calls[0].name, "get_weather");
  EXPECT_EQ(out.calls[0].arguments, "{\"city\": \"Z\u00fcrich\"}");
}

TEST(ChainedParsersTest, ThinkingOffThenLlamaCall) {
  const Outcome out = ParseAllWays("{\"name\": \"f\", \"parameters\": {\"x\": 1}}",
                                   "qwen3", false, "llama3_json");
  EXPECT_EQ(out.reasoning, "");
  EXPECT_EQ(out.content, "");
  ASSERT_EQ(out.calls.size(), 1u);
  EXPECT_EQ(out.calls[0].arguments, "{\"x\": 1}");
}

TEST(ReasoningParserTest, UnknownNameNamesTheAcceptedOnes) {
  const auto parser = ReasoningParser::Create("granite", false);
  EXPECT_EQ(parser.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(parser.status().message(), HasSubstr("deepseek_r1, qwen3"));
  EXPECT_TRUE(ValidReasoningParserName("qwen3").ok());
}

}  // namespace
}  // namespace tpserve
