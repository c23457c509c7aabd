#include "server/chat/tool_call_parser.h"

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include <nlohmann/json.hpp>

#include "gtest/gtest.h"

namespace tpserve {

bool operator==(const ParsedToolCall& a, const ParsedToolCall& b) {
  return a.id == b.id && a.name == b.name && a.arguments == b.arguments;
}

void PrintTo(const ParsedToolCall& call, std::ostream* os) {
  *os << "{" << call.id << ", " << call.name << ", " << call.arguments << "}";
}

namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

IdGenerator CountingIds() {
  auto next = std::make_shared<int>(0);
  return [next] { return absl::StrCat("call_", (*next)++); };
}

struct Outcome {
  std::string content;
  std::vector<ParsedToolCall> calls;  // rebuilt from the deltas
};

// Byte offsets where text is cut into deltas: never inside a UTF-8 sequence.
std::vector<size_t> EveryCharacter(const std::string& text) {
  std::vector<size_t> cuts;
  for (size_t i = 1; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) cuts.push_back(i);
  }
  return cuts;
}

std::vector<size_t> RandomCuts(const std::string& text, uint32_t seed) {
  std::mt19937 rng(seed);
  std::bernoulli_distribution cut(0.3);
  std::vector<size_t> cuts;
  for (size_t i : EveryCharacter(text)) {
    if (cut(rng)) cuts.push_back(i);
  }
  return cuts;
}

// Feeds text cut at cuts, checks the delta protocol, and rebuilds the calls from the
// deltas; they must equal parser.calls().
Outcome FeedInPieces(absl::string_view format, const std::string& text,
                     const std::vector<size_t>& cuts) {
  auto parser = ToolCallParser::Create(format, CountingIds());
  EXPECT_TRUE(parser.ok()) << parser.status();
  Outcome out;
  auto take = [&out](const ParsedDelta& delta) {
    EXPECT_TRUE(delta.reasoning.empty());
    out.content += delta.content;
    for (const ToolCallDelta& piece : delta.tool_calls) {
      if (piece.index == static_cast<int>(out.calls.size())) {
        EXPECT_FALSE(piece.id.empty());
        EXPECT_FALSE(piece.name.empty());
        EXPECT_TRUE(piece.arguments.empty());
        out.calls.push_back({piece.id, piece.name, ""});
      } else {
        ASSERT_EQ(piece.index, static_cast<int>(out.calls.size()) - 1);
        EXPECT_TRUE(piece.id.empty() && piece.name.empty());
        out.calls.back().arguments += piece.arguments;
      }
    }
  };
  size_t begin = 0;
  for (size_t end : cuts) {
    take((*parser)->Feed(absl::string_view(text).substr(begin, end - begin)));
    begin = end;
  }
  take((*parser)->Feed(absl::string_view(text).substr(begin)));
  take((*parser)->Finish());
  EXPECT_EQ(out.calls, (*parser)->calls());
  return out;
}

// Parses text whole, one character at a time and at seeded random cuts; all must agree.
Outcome ParseAllWays(absl::string_view format, const std::string& text) {
  const Outcome whole = FeedInPieces(format, text, {});
  std::vector<std::vector<size_t>> splits = {EveryCharacter(text)};
  for (uint32_t seed = 1; seed <= 10; ++seed) splits.push_back(RandomCuts(text, seed));
  for (const std::vector<size_t>& cuts : splits) {
    const Outcome split = FeedInPieces(format, text, cuts);
    EXPECT_EQ(split.content, whole.content) << text;
    EXPECT_EQ(split.calls, whole.calls) << text;
  }
  return whole;
}

ParsedToolCall Call(std::string id, std::string name, std::string arguments) {
  return {std::move(id), std::move(name), std::move(arguments)};
}

TEST(HermesTest, PlainTextIsContentAndNothingIsHeldAtTheEnd) {
  const std::string text = "Hello, world! 1 < 2, <b>bold</b>, <tool and <tool_cal.";
  const Outcome out = ParseAllWays("hermes", text);
  EXPECT_EQ(out.content, text);
  EXPECT_TRUE(out.calls.empty());

  auto parser = *ToolCallParser::Create("hermes", CountingIds());
  EXPECT_EQ(parser->Feed("Hello").content, "Hello");
  EXPECT_EQ(parser->Feed(" <tool_").content, " ");
  EXPECT_EQ(parser->Feed("x").content, "<tool_x");
  EXPECT_TRUE(parser->Finish().empty());
}

TEST(HermesTest, HeldTextNeverExceedsTheTagOutsideCalls) {
  const std::string text = "a <tool_ca <<tool_call <tool_call_ <</tool_call> z";
  auto parser = *ToolCallParser::Create("hermes", CountingIds());
  std::string released;
  for (size_t i = 0; i < text.size(); ++i) {
    released += parser->Feed(text.substr(i, 1)).content;
    EXPECT_LT(i + 1 - released.size(), std::string("<tool_call>").size());
  }
  EXPECT_EQ(released + parser->Finish().content, text);
}

TEST(HermesTest, OneCall) {
  const Outcome out = ParseAllWays(
      "hermes",
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
      "</tool_call>");
  EXPECT_EQ(out.content, "");
  EXPECT_THAT(out.calls, ElementsAre(Call("call_0", "get_weather", "{\"city\": \"Paris\"}")));
}

TEST(HermesTest, SeveralCallsWithContentBeforeAndAfter) {
  const Outcome out = ParseAllWays(
      "hermes",
      "Let me check both.\n"
      "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>\n"
      "Both asked.");
  EXPECT_EQ(out.content, "Let me check both.\n\nBoth asked.");
  EXPECT_THAT(out.calls, ElementsAre(Call("call_0", "f", "{\"a\": 1}"),
                                     Call("call_1", "g", "{}")));
}

TEST(HermesTest, WhitespaceAfterTheLastCallIsDropped) {
  const Outcome out = ParseAllWays(
      "hermes", "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>\n\n  ");
  EXPECT_EQ(out.content, "");
  EXPECT_EQ(out.calls.size(), 1u);
}

TEST(HermesTest, NestedJsonTagsInStringsAndUnicodeKeepTheModelsText) {
  const std::string arguments =
      "{\"q\": \"a}b</tool_call>c<tool_call>\", \"n\": {\"x\": [1, {\"y\": \"\\\"}\"}], "
      "\"z\": null},\n  \"u\": \"h\u00e9llo \u4e16\u754c \U0001F389\", \"e\": \"\\u00e9\"}";
  const Outcome out = ParseAllWays(
      "hermes", "<tool_call>\n{\"name\": \"search\", \"arguments\": " + arguments +
                    "}\n</tool_call>");
  EXPECT_EQ(out.content, "");
  EXPECT_THAT(out.calls, ElementsAre(Call("call_0", "search", arguments)));
}

TEST(HermesTest, ArgumentsMayComeFirstOrBeMissing) {
  const Outcome out = ParseAllWays(
      "hermes",
      "<tool_call>{\"arguments\": {\"k\": \"v\"}, \"name\": \"f\"}</tool_call>"
      "<tool_call>{\"name\": \"now\"}</tool_call>"
      "<tool_call>{\"name\": \"nil\", \"arguments\": null}</tool_call>");
  EXPECT_THAT(out.calls, ElementsAre(Call("call_0", "f", "{\"k\": \"v\"}"),
                                     Call("call_1", "now", "{}"),
                                     Call("call_2", "nil", "{}")));
}

TEST(HermesTest, MalformedCallIsContentAndLaterCallsStillParse) {
  const std::string bad_json =
      "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": }}\n</tool_call>";
  const std::string no_name = "<tool_call>{\"arguments\": {}}</tool_call>";
  const std::string string_args = "<tool_call>{\"name\": \"f\", \"arguments\": \"{}\"}</tool_call>";
  const std::string not_json = "<tool_call>I cannot call tools</tool_call>";
  const std::string good = "<tool_call>{\"name\": \"ok\", \"arguments\": {}}</tool_call>";
  const Outcome out =
      ParseAllWays("hermes", bad_json + no_name + string_args + not_json + good);
  EXPECT_EQ(out.content, bad_json + no_name + string_args + not_json);
  EXPECT_THAT(out.calls, ElementsAre(Call("call_0", "ok", "{}")));
}

TEST(HermesTest, UnclosedCallAtTheEndIsACallOnlyIfItsBodyIsValid) {
  Outcome out = ParseAllWays("hermes", "Sure.<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n");
  EXPECT_EQ(out.content, "Sure.");
  EXPECT_THAT(out.calls, ElementsAre(Call("call_0", "f", "{}")));

  const std::string truncated = "Sure.<tool_call>\n{\"name\": \"f\", \"argu";
  out = ParseAllWays("hermes", truncated);
  EXPECT_EQ(out.content, truncated);
  EXPECT_TRUE(out.calls.empty());
}

TEST(HermesTest, UnterminatedStringSwallowsTheCloseTagUntilTheEnd) {
  const std::string text =
      "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": \"x}}</tool_call> after";
  const Outcome out = ParseAllWays("hermes", text);
  EXPECT_EQ(out.content, text);
  EXPECT_TRUE(out.calls.empty());
}

TEST(HermesTest, OversizedBodyIsReleasedAsContent) {
  const std::string text = "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": \"" +
                           std::string(kMaxToolCallBytes, 'x') + "\"}}</tool_call>tail";
  for (const std::vector<size_t>& cuts : {std::vector<size_t>{}, RandomCuts(text, 7)}) {
    const Outcome out = FeedInPieces("hermes", text, cuts);
    EXPECT_EQ(out.content, text);
    EXPECT_TRUE(out.calls.empty());
  }
}

TEST(HermesTest, DeeplyNestedArgumentsDoNotOverflowTheStack) {
  const std::string arguments =
      "{\"a\": " + std::string(200000, '[') + std::string(200000, ']') + "}";
  auto parser = *ToolCallParser::Create("hermes", CountingIds());
  parser->Feed("<tool_call>{\"name\": \"f\", \"arguments\": " + arguments + "}</tool_call>");
  parser->Finish();
  ASSERT_EQ(parser->calls().size(), 1u);
  EXPECT_EQ(parser->calls()[0].arguments, arguments);
}

TEST(Llama3JsonTest, OneCallWithParameters) {
  const Outcome out = ParseAllWays(
      "llama3_json", "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}");
  EXPECT_EQ(out.content, "");
  EXPECT_THAT(out.calls, ElementsAre(Call("call_0", "get_weather", "{\"city\": \"Paris\"}")));
}

TEST(Llama3JsonTest, PythonTagAndSemicolonSeparatedCalls) {
  const Outcome out = ParseAllWays(
      "llama3_json",
      "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"a\": {\"b\": [1, 2]}}}; "
      "{\"name\": \"g\", \"arguments\": {\"s\": \"}{;\\\"\"}};{\"name\": \"h\"}");
  EXPECT_EQ(out.content, "");
  EXPECT_THAT(out.calls, ElementsAre(Call("call_0", "f", "{\"a\": {\"b\": [1, 2]}}"),
                                     Call("call_1", "g", "{\"s\": \"}{;\\\"\"}"),
                                     Call("call_2", "h", "{}")));
}

TEST(Llama3JsonTest, LeadingWhitespaceAndUnicode) {
  const Outcome out = ParseAllWays(
      "llama3_json",
      "\n\n{\"name\": \"translate\", \"parameters\": {\"text\": \"\u00e7a va \U0001F600\"}}");
  EXPECT_EQ(out.content, "");
  EXPECT_THAT(out.calls, ElementsAre(Call("call_0", "translate",
                                          "{\"text\": \"\u00e7a va \U0001F600\"}")));
}

TEST(Llama3JsonTest, AnswerNotStartingWithABraceIsContent) {
  for (const std::string text : {"The answer is {\"name\": \"f\"}.", "<|eot|> {x}",
                                 " 42", "<|python", ""}) {
    const Outcome out = ParseAllWays("llama3_json", text);
    EXPECT_EQ(out.content, text);
    EXPECT_TRUE(out.calls.empty());
  }
}

TEST(Llama3JsonTest, TextAfterTheCallsIsContent) {
  const Outcome out = ParseAllWays(
      "llama3_json", "{\"name\": \"f\", \"parameters\": {}}\n\nHope that helps.");
  EXPECT_EQ(out.content, "\n\nHope that helps.");
  EXPECT_THAT(out.calls, ElementsAre(Call("call_0", "f", "{}")));
}

TEST(Llama3JsonTest, JsonThatIsNotACallAndMalformedJsonAreContent) {
  for (const std::string text :
       {"{\"answer\": 42} is the result", "{\"name\": \"f\", \"parameters\": {\"a\": }}",
        "{\"name\": \"f\", \"param", "{\"name\": \"f\", \"parameters\": [1]}"}) {
    const Outcome out = ParseAllWays("llama3_json", text);
    EXPECT_EQ(out.content, text);
    EXPECT_TRUE(out.calls.empty());
  }
}

TEST(Llama3JsonTest, MalformedCallAfterAGoodOneEndsTheCalls) {
  const Outcome out = ParseAllWays(
      "llama3_json", "{\"name\": \"f\", \"parameters\": {}}; {\"oops\": 1}; {\"name\": \"g\"}");
  EXPECT_EQ(out.content, "{\"oops\": 1}; {\"name\": \"g\"}");
  EXPECT_THAT(out.calls, ElementsAre(Call("call_0", "f", "{}")));
}

TEST(Llama3JsonTest, PythonTagWithoutJsonIsContentWithoutTheTag) {
  const Outcome out =
      ParseAllWays("llama3_json", "<|python_tag|>brave_search.call(query=\"x\")");
  EXPECT_EQ(out.content, "brave_search.call(query=\"x\")");
  EXPECT_TRUE(out.calls.empty());
}

TEST(Llama3JsonTest, OversizedObjectIsReleasedAsContent) {
  const std::string text = "{\"name\": \"f\", \"parameters\": {\"a\": \"" +
                           std::string(kMaxToolCallBytes, 'x') + "\"}} tail";
  for (const std::vector<size_t>& cuts : {std::vector<size_t>{}, RandomCuts(text, 3)}) {
    const Outcome out = FeedInPieces("llama3_json", text, cuts);
    EXPECT_EQ(out.content, text);
    EXPECT_TRUE(out.calls.empty());
  }
}

TEST(ToolCallParserTest, UnknownNameNamesTheAcceptedOnes) {
  const auto parser = ToolCallParser::Create("mistral");
  EXPECT_EQ(parser.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(parser.status().message(), HasSubstr("hermes, llama3_json"));
  EXPECT_TRUE(ValidToolParserName("hermes").ok());
  EXPECT_FALSE(ValidToolParserName("Hermes").ok());
}

TEST(ToolCallParserTest, RandomIdsLookLikeOpenAIs) {
  IdGenerator ids = RandomToolCallIds();
  const std::string a = ids();
  const std::string b = ids();
  EXPECT_NE(a, b);
  for (const std::string& id : {a, b}) {
    ASSERT_EQ(id.size(), 5u + 24u);
    EXPECT_EQ(id.substr(0, 5), "call_");
    for (char c : id.substr(5)) EXPECT_TRUE(absl::ascii_isalnum(c)) << id;
  }
  auto parser = *ToolCallParser::Create("hermes");  // no generator: random ids
  parser->Feed("<tool_call>{\"name\": \"f\"}</tool_call>");
  EXPECT_EQ(parser->calls().at(0).id.substr(0, 5), "call_");
}

TEST(ToolCallParserTest, FinishReasonIsToolCallsOnceACallWasParsed) {
  auto parser = *ToolCallParser::Create("hermes", CountingIds());
  EXPECT_EQ(ChatFinishReason("stop", nullptr), "stop");
  parser->Feed("no calls");
  EXPECT_EQ(ChatFinishReason("length", parser.get()), "length");
  parser->Feed("<tool_call>{\"name\": \"f\"}</tool_call>");
  EXPECT_EQ(ChatFinishReason("stop", parser.get()), "tool_calls");
}

}  // namespace
}  // namespace tpserve

namespace tpserve {
namespace {

// The prefix that forces a call, fed before the model's continuation, gives the call.
TEST(ForcedToolCallPrefix, TheModelsContinuationCompletesTheCall) {
  const std::string name = "get_weather";
  const struct {
    const char* parser;
    const std::string* function;
    const char* continuation;
  } cases[] = {
      {"hermes", &name, "{\"city\": \"Paris\"}}\n</tool_call>"},
      {"hermes", nullptr, "get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"},
      {"llama3_json", &name, "{\"city\": \"Paris\"}}"},
      {"llama4_json", nullptr, "get_weather\", \"parameters\": {\"city\": \"Paris\"}}"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.parser);
    auto parser = ToolCallParser::Create(c.parser, [] { return std::string("call_x"); });
    ASSERT_TRUE(parser.ok());
    ParsedDelta prefix = (*parser)->Feed(ForcedToolCallPrefix(c.parser, c.function));
    EXPECT_TRUE(prefix.empty());
    ParsedDelta out = (*parser)->Feed(c.continuation);
    out.Append((*parser)->Finish());
    EXPECT_EQ(out.content, "");
    ASSERT_EQ((*parser)->calls().size(), 1u);
    EXPECT_EQ((*parser)->calls()[0].name, "get_weather");
    EXPECT_EQ(nlohmann::json::parse((*parser)->calls()[0].arguments),
              nlohmann::json({{"city", "Paris"}}));
  }
  // A name is JSON-escaped.
  const std::string odd = "a\"b";
  EXPECT_EQ(ForcedToolCallPrefix("llama3_json", &odd), "{\"name\": \"a\\\"b\", \"parameters\": ");
}

}  // namespace
}  // namespace tpserve
