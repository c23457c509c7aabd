#include "server/openai/openai_response.h"

#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

using Json = nlohmann::json;

ResponseIdentity Identity() { return {"id-1", 1700000000, "tiny"}; }

EngineChunk Chunk(int index, std::string text, std::vector<int32_t> ids = {1}) {
  EngineChunk c;
  c.index = index;
  c.text = std::move(text);
  c.token_ids = std::move(ids);
  return c;
}

EngineChunk Last(EngineChunk c, FinishReason reason, int prompt, int completion) {
  c.finish_reason = reason;
  c.prompt_tokens = prompt;
  c.completion_tokens = completion;
  return c;
}

PositionLogprobs Position(int id, std::string text, float logprob,
                          std::vector<TokenLogprob> top = {}) {
  PositionLogprobs p;
  p.chosen = {id, logprob, std::move(text)};
  p.top = std::move(top);
  return p;
}

std::vector<Json> Parse(const std::vector<std::string>& events) {
  std::vector<Json> out;
  for (const std::string& e : events) out.push_back(Json::parse(e));
  return out;
}

TEST(CompletionOutput, StreamsTextCompletionChunksThenUsage) {
  CompletionOutput out(Identity(), 1, 1, -1, {}, true);
  std::vector<Json> first = Parse(out.Feed(Chunk(0, "Hel")));
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0]["object"], "text_completion");
  EXPECT_EQ(first[0]["id"], "id-1");
  EXPECT_EQ(first[0]["model"], "tiny");
  EXPECT_EQ(first[0]["choices"][0]["text"], "Hel");
  EXPECT_TRUE(first[0]["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(first[0].contains("usage") && first[0]["usage"].is_null());
  EXPECT_TRUE(out.Feed(Chunk(0, "")).empty());  // tokens held back, nothing to say
  std::vector<Json> last = Parse(out.Feed(Last(Chunk(0, "lo"), FinishReason::kEos, 3, 4)));
  EXPECT_EQ(last[0]["choices"][0]["finish_reason"], "stop");
  const Json usage = Json::parse(out.UsageEvent());
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(usage["usage"]["completion_tokens"], 4);
  EXPECT_EQ(usage["usage"]["total_tokens"], 7);
  EXPECT_EQ(Json::parse(out.Body())["choices"][0]["text"], "Hello");
}

TEST(CompletionOutput, ChoicesOfSeveralPromptsCountEachPromptOnce) {
  CompletionOutput out(Identity(), 2, 2, -1, {}, false);  // choice = prompt × 2 + j
  out.Feed(Last(Chunk(0, "a"), FinishReason::kLength, 5, 1));
  out.Feed(Last(Chunk(1, "b"), FinishReason::kLength, 5, 1));
  out.Feed(Last(Chunk(2, "c"), FinishReason::kStop, 7, 2));
  out.Feed(Last(Chunk(3, "d"), FinishReason::kCancelled, 7, 3));
  const Json body = Json::parse(out.Body());
  ASSERT_EQ(body["choices"].size(), 4u);
  EXPECT_EQ(body["choices"][2]["text"], "c");
  EXPECT_EQ(body["choices"][2]["index"], 2);
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["choices"][3]["finish_reason"], "abort");
  EXPECT_EQ(body["usage"]["prompt_tokens"], 12);
  EXPECT_EQ(body["usage"]["completion_tokens"], 7);
}

TEST(CompletionOutput, LogprobsInTheCompletionsFormatWithOffsetsAfterTheEcho) {
  CompletionOutput out(Identity(), 1, 1, 1, {"Hé"}, false);
  EngineChunk c = Chunk(0, " yo", {5, 6});
  c.logprobs = {Position(5, " y", -0.5f, {{9, -0.25f, " z"}}),
                Position(6, "o", -std::numeric_limits<float>::infinity(), {{6, -1.0f, "o"}})};
  out.Feed(Last(c, FinishReason::kLength, 2, 2));
  const Json choice = Json::parse(out.Body())["choices"][0];
  EXPECT_EQ(choice["text"], "Hé yo");
  EXPECT_EQ(choice["logprobs"]["tokens"], Json::array({" y", "o"}));
  EXPECT_EQ(choice["logprobs"]["token_logprobs"][1], -9999.0);  // -inf has no JSON form
  EXPECT_EQ(choice["logprobs"]["text_offset"], Json::array({2, 4}));  // code points
  // The sampled token is listed among the alternatives.
  EXPECT_EQ(choice["logprobs"]["top_logprobs"][0], Json({{" z", -0.25}, {" y", -0.5}}));
}

ChatParsing Parsing(std::string tools, std::string reasoning = "") {
  ChatParsing p;
  p.tool_parser = std::move(tools);
  p.reasoning_parser = std::move(reasoning);
  int next = 0;
  p.tool_call_ids = [next]() mutable { return "call_" + std::to_string(next++); };
  return p;
}

TEST(ChatOutput, StreamsRoleThenContentDeltas) {
  auto out = ChatOutput::Create(Identity(), 1, -1, Parsing(""), false);
  ASSERT_TRUE(out.ok());
  std::vector<Json> events = Parse((*out)->Feed(Chunk(0, "Hi")));
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(events[0]["choices"][0]["delta"], Json({{"role", "assistant"}, {"content", ""}}));
  EXPECT_EQ(events[1]["choices"][0]["delta"], Json({{"content", "Hi"}}));
  EXPECT_FALSE(events[1].contains("usage"));
  std::vector<Json> last = Parse((*out)->Feed(Last(Chunk(0, "!"), FinishReason::kLength, 4, 2)));
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0]["choices"][0]["finish_reason"], "length");
  const Json body = Json::parse((*out)->Body());
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["choices"][0]["message"]["content"], "Hi!");
  EXPECT_EQ(body["choices"][0]["message"]["role"], "assistant");
  EXPECT_TRUE(body["choices"][0]["message"]["tool_calls"].empty());
  EXPECT_EQ(body["usage"]["total_tokens"], 6);
}

TEST(ChatOutput, HermesToolCallsBecomeToolCallDeltasAndFinishReason) {
  auto out = ChatOutput::Create(Identity(), 1, -1, Parsing("hermes"), false);
  ASSERT_TRUE(out.ok());
  std::vector<Json> all;
  for (const char* piece : {"Let me check.", "<tool_", "call>\n{\"name\": \"get_weather\", ",
                            "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"}) {
    for (Json& e : Parse((*out)->Feed(Chunk(0, piece)))) all.push_back(std::move(e));
  }
  for (Json& e : Parse((*out)->Feed(Last(Chunk(0, ""), FinishReason::kEos, 9, 20)))) {
    all.push_back(std::move(e));
  }
  std::string content;
  std::string name;
  std::string arguments;
  std::string finish;
  for (const Json& e : all) {
    const Json& choice = e["choices"][0];
    if (choice["delta"].contains("content")) content += choice["delta"]["content"].get<std::string>();
    if (choice["delta"].contains("tool_calls")) {
      const Json& call = choice["delta"]["tool_calls"][0];
      EXPECT_EQ(call["index"], 0);
      if (call.contains("id")) {
        EXPECT_EQ(call["id"], "call_0");
        EXPECT_EQ(call["type"], "function");
        name = call["function"]["name"];
      }
      arguments += call["function"]["arguments"].get<std::string>();
    }
    if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
  }
  EXPECT_EQ(content, "Let me check.");
  EXPECT_EQ(name, "get_weather");
  EXPECT_EQ(Json::parse(arguments), Json({{"city", "Paris"}}));
  EXPECT_EQ(finish, "tool_calls");
  const Json message = Json::parse((*out)->Body())["choices"][0]["message"];
  EXPECT_EQ(message["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(message["content"], "Let me check.");
  EXPECT_EQ(Json::parse((*out)->Body())["choices"][0]["finish_reason"], "tool_calls");
}

TEST(ChatOutput, ReasoningIsSplitIntoReasoningContent) {
  auto out = ChatOutput::Create(Identity(), 1, -1, Parsing("", "qwen3"), false);
  ASSERT_TRUE(out.ok());
  (*out)->Feed(Chunk(0, "<think>hmm"));
  (*out)->Feed(Chunk(0, "</think>"));
  (*out)->Feed(Last(Chunk(0, "Yes."), FinishReason::kEos, 1, 3));
  const Json message = Json::parse((*out)->Body())["choices"][0]["message"];
  EXPECT_EQ(message["reasoning_content"], "hmm");
  EXPECT_EQ(message["content"], "Yes.");
}

TEST(ChatOutput, LogprobsInTheChatFormat) {
  auto out = ChatOutput::Create(Identity(), 1, 1, Parsing(""), false);
  ASSERT_TRUE(out.ok());
  EngineChunk c = Chunk(0, "é");
  c.logprobs = {Position(3, "é", -0.5f, {{3, -0.5f, "é"}})};
  std::vector<Json> events = Parse((*out)->Feed(Last(c, FinishReason::kLength, 1, 1)));
  const Json entry = events.back()["choices"][0]["logprobs"]["content"][0];
  EXPECT_EQ(entry["token"], "é");
  EXPECT_EQ(entry["logprob"], -0.5);
  EXPECT_EQ(entry["bytes"], Json::array({0xc3, 0xa9}));
  EXPECT_EQ(entry["top_logprobs"][0]["token"], "é");
  EXPECT_EQ(Json::parse((*out)->Body())["choices"][0]["logprobs"]["content"].size(), 1u);
}

TEST(ChatOutput, UnknownParserIsAnError) {
  EXPECT_FALSE(ChatOutput::Create(Identity(), 1, -1, Parsing("nope"), false).ok());
}

}  // namespace
}  // namespace tpserve
