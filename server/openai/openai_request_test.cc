#include "server/openai/openai_request.h"

#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "server/openai/openai_error.h"

namespace tpserve {
namespace {

OrderedJson Body(const std::string& text) {
  absl::StatusOr<OrderedJson> body = ParseRequestBody(text);
  EXPECT_TRUE(body.ok()) << body.status();
  return body.ok() ? *body : OrderedJson::object();
}

// The request is refused naming `param`, and the message names it too.
void ExpectParamError(const absl::Status& status, const std::string& param) {
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_EQ(ErrorParam(status), param) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), param)) << status;
  EXPECT_EQ(HttpStatusOf(status), 400);
}

TEST(ParseRequestBody, RefusesMalformedNonObjectAndTooDeep) {
  EXPECT_TRUE(absl::IsInvalidArgument(ParseRequestBody("{\"a\": ").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ParseRequestBody("[1, 2]").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ParseRequestBody("").status()));
  std::string deep = "{\"a\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  absl::StatusOr<OrderedJson> parsed = ParseRequestBody(deep);
  ASSERT_FALSE(parsed.ok());
  EXPECT_TRUE(absl::StrContains(parsed.status().message(), "deeper")) << parsed.status();
}

TEST(ParseRequestBody, KeepsTheClientsKeyOrder) {
  OrderedJson body = Body(R"({"z": 1, "a": {"y": 2, "b": 3}})");
  EXPECT_EQ(body.dump(), R"({"z":1,"a":{"y":2,"b":3}})");
}

TEST(ReadCompletionRequest, DefaultsAsOpenAi) {
  absl::StatusOr<CompletionRequest> r = ReadCompletionRequest(Body(R"({"prompt": "hi"})"), "m");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->prompts.size(), 1u);
  EXPECT_EQ(r->prompts[0].text(), "hi");
  EXPECT_EQ(r->prompts[0].sampling().max_tokens(), 16);  // OpenAI's default for completions
  EXPECT_FALSE(r->prompts[0].sampling().has_temperature());
  EXPECT_FALSE(r->common.stream);
  EXPECT_EQ(r->logprobs, -1);
}

TEST(ReadCompletionRequest, EveryPromptForm) {
  absl::StatusOr<CompletionRequest> ids = ReadCompletionRequest(Body(R"({"prompt": [1, 2, 3]})"), "m");
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_EQ(ids->prompts.size(), 1u);
  EXPECT_EQ(ids->prompts[0].token_ids().ids_size(), 3);

  absl::StatusOr<CompletionRequest> many =
      ReadCompletionRequest(Body(R"({"prompt": ["a", [4, 5], "b"], "n": 2})"), "m");
  ASSERT_TRUE(many.ok()) << many.status();
  ASSERT_EQ(many->prompts.size(), 3u);
  EXPECT_EQ(many->prompts[0].text(), "a");
  EXPECT_EQ(many->prompts[1].token_ids().ids(1), 5);
  EXPECT_EQ(many->n, 2);

  ExpectParamError(ReadCompletionRequest(Body(R"({"prompt": []})"), "m").status(), "prompt");
  ExpectParamError(ReadCompletionRequest(Body(R"({"prompt": ""})"), "m").status(), "prompt");
  ExpectParamError(ReadCompletionRequest(Body(R"({"prompt": [1, -2]})"), "m").status(), "prompt");
  ExpectParamError(ReadCompletionRequest(Body(R"({"prompt": [1.5]})"), "m").status(), "prompt[0]");
  ExpectParamError(ReadCompletionRequest(Body(R"({})"), "m").status(), "prompt");
  ExpectParamError(ReadCompletionRequest(Body(R"({"prompt": ["a", 3]})"), "m").status(),
                   "prompt[1]");
}

TEST(ReadCompletionRequest, SamplingFieldsAndTheirLimits) {
  absl::StatusOr<CompletionRequest> r = ReadCompletionRequest(
      Body(R"({"prompt": "x", "max_tokens": 5, "temperature": 0, "top_p": 0.5, "top_k": 4,
               "min_p": 0.1, "repetition_penalty": 1.2, "presence_penalty": -1,
               "frequency_penalty": 2, "seed": -1, "n": 3, "stop": "END",
               "stop_token_ids": [7], "ignore_eos": true, "skip_special_tokens": false,
               "logprobs": 2, "user": "u", "unknown_field": {"ignored": true}})"),
      "m");
  ASSERT_TRUE(r.ok()) << r.status();
  const v1::SamplingParams& s = r->prompts[0].sampling();
  EXPECT_EQ(s.max_tokens(), 5);
  EXPECT_EQ(s.temperature(), 0);
  EXPECT_FLOAT_EQ(s.top_p(), 0.5f);
  EXPECT_EQ(s.top_k(), 4);
  EXPECT_FLOAT_EQ(s.repetition_penalty(), 1.2f);
  EXPECT_EQ(s.seed(), ~uint64_t{0});  // a negative seed keeps its bits
  EXPECT_EQ(s.n(), 3);
  ASSERT_EQ(s.stop_size(), 1);
  EXPECT_EQ(s.stop(0), "END");
  EXPECT_EQ(s.stop_token_ids(0), 7);
  EXPECT_TRUE(s.ignore_eos());
  EXPECT_FALSE(r->prompts[0].skip_special_tokens());
  EXPECT_EQ(s.logprobs(), 2);
  EXPECT_EQ(r->logprobs, 2);

  const struct {
    const char* body;
    const char* param;
  } bad[] = {
      {R"({"prompt": "x", "temperature": -1})", "temperature"},
      {R"({"prompt": "x", "temperature": "hot"})", "temperature"},
      {R"({"prompt": "x", "top_p": 0})", "top_p"},
      {R"({"prompt": "x", "top_k": -2})", "top_k"},
      {R"({"prompt": "x", "max_tokens": 0})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 1.5})", "max_tokens"},
      {R"({"prompt": "x", "n": 17})", "n"},
      {R"({"prompt": "x", "presence_penalty": 3})", "presence_penalty"},
      {R"({"prompt": "x", "repetition_penalty": 0})", "repetition_penalty"},
      {R"({"prompt": "x", "logprobs": 21})", "logprobs"},
      {R"({"prompt": "x", "stop": 5})", "stop"},
      {R"({"prompt": "x", "stop": ["a", 1]})", "stop[1]"},
      {R"({"prompt": "x", "stop_token_ids": [-1]})", "stop_token_ids[0]"},
      {R"({"prompt": "x", "logit_bias": {"5": 100}})", "logit_bias"},
      {R"({"prompt": "x", "suffix": "tail"})", "suffix"},
      {R"({"prompt": "x", "best_of": 3})", "best_of"},
      {R"({"prompt": "x", "min_tokens": 4})", "min_tokens"},
      {R"({"prompt": "x", "response_format": {"type": "json_object"}})", "response_format"},
      {R"({"prompt": "x", "stream_options": {"include_usage": true}})", "stream_options"},
      {R"({"prompt": "x", "request_id": "a\nb"})", "request_id"},
      {R"({"prompt": "x", "stream": true, "stream_options": {"continuous_usage_stats": true}})",
       "stream_options.continuous_usage_stats"},
      {R"({"prompt": "x", "audio": {"voice": "alloy"}})", "audio"},
      {R"({"prompt": "x", "modalities": ["text", "audio"]})", "modalities"},
  };
  for (const auto& b : bad) {
    SCOPED_TRACE(b.body);
    ExpectParamError(ReadCompletionRequest(Body(b.body), "m").status(), b.param);
  }
}

TEST(ReadCompletionRequest, AnotherModelIsNotFound) {
  absl::Status status = ReadCompletionRequest(Body(R"({"model": "gpt-4", "prompt": "x"})"), "tiny")
                            .status();
  EXPECT_TRUE(absl::IsNotFound(status)) << status;
  EXPECT_EQ(HttpStatusOf(status), 404);
  EXPECT_TRUE(absl::StrContains(status.message(), "gpt-4")) << status;
  EXPECT_TRUE(ReadCompletionRequest(Body(R"({"model": "tiny", "prompt": "x"})"), "tiny").ok());
}

TEST(ReadCompletionRequest, StreamOptions) {
  absl::StatusOr<CompletionRequest> r = ReadCompletionRequest(
      Body(R"({"prompt": "x", "stream": true, "stream_options": {"include_usage": true}})"), "m");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->common.stream);
  EXPECT_TRUE(r->common.include_usage);
}

TEST(ReadChatRequest, MessagesBecomeTemplateInputs) {
  absl::StatusOr<ChatRequest> r = ReadChatRequest(Body(R"({
      "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "f", "arguments": "{\"x\": 1, \"a\": [2]}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"}],
      "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
      "max_completion_tokens": 9, "max_tokens": 3, "logprobs": true, "top_logprobs": 2,
      "chat_template_kwargs": {"enable_thinking": false}})"),
                                                  "m");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->messages[1]["content"], "a\nb");  // text parts joined
  // Arguments reach the template as a mapping, in the client's key order.
  EXPECT_EQ(r->messages[2]["tool_calls"][0]["function"]["arguments"].dump(), R"({"x":1,"a":[2]})");
  EXPECT_EQ(r->tool_choice, ToolChoice::kAuto);
  EXPECT_EQ(r->generate.sampling().max_tokens(), 9);  // max_completion_tokens wins
  EXPECT_EQ(r->generate.sampling().logprobs(), 2);
  EXPECT_FALSE(r->generate.add_special_tokens());  // the template adds them
  EXPECT_TRUE(r->add_generation_prompt);
  EXPECT_EQ(r->template_kwargs["enable_thinking"], false);
}

TEST(ReadChatRequest, RefusesWhatItCannotServeByName) {
  const struct {
    const char* body;
    const char* param;
  } bad[] = {
      {R"({})", "messages"},
      {R"({"messages": []})", "messages"},
      {R"({"messages": [{"role": "wizard", "content": "x"}]})", "messages[0].role"},
      {R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})",
       "messages[0].content[0]"},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f",
          "arguments": "{not json"}}]}]})",
       "messages[0].tool_calls[0].function.arguments"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", "top_logprobs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"})",
       "tool_choice"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function",
          "function": {"name": "f"}}], "tool_choice": {"type": "function", "function":
          {"name": "g"}}})",
       "tool_choice"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "code"}]})",
       "tools[0].type"},
      {R"({"messages": [{"role": "user", "content": "x"}], "continue_final_message": true})",
       "continue_final_message"},
      {R"({"messages": [{"role": "user", "content": "x"}], "chat_template": "{{ 1 }}"})",
       "chat_template"},
      {R"({"messages": [{"role": "user", "content": "x"}], "functions": []})", "functions"},
  };
  for (const auto& b : bad) {
    SCOPED_TRACE(b.body);
    ExpectParamError(ReadChatRequest(Body(b.body), "m").status(), b.param);
  }
}

TEST(ReadChatRequest, ToolChoiceForms) {
  const std::string tools =
      R"("tools": [{"type": "function", "function": {"name": "f"}}], "messages": [{"role": "user", "content": "x"}])";
  absl::StatusOr<ChatRequest> none = ReadChatRequest(Body("{" + tools + R"(, "tool_choice": "none"})"), "m");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->tool_choice, ToolChoice::kNone);
  EXPECT_FALSE(none->tools.is_null());  // the template still sees them, as vLLM does
  absl::StatusOr<ChatRequest> named = ReadChatRequest(
      Body("{" + tools + R"(, "tool_choice": {"type": "function", "function": {"name": "f"}}})"), "m");
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ(named->tool_choice, ToolChoice::kNamed);
  EXPECT_EQ(named->named_tool, "f");
  absl::StatusOr<ChatRequest> no_tools =
      ReadChatRequest(Body(R"({"messages": [{"role": "user", "content": "x"}]})"), "m");
  ASSERT_TRUE(no_tools.ok());
  EXPECT_EQ(no_tools->tool_choice, ToolChoice::kNone);
}

TEST(ReadChatRequest, ContinueFinalMessage) {
  absl::StatusOr<ChatRequest> r = ReadChatRequest(
      Body(R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "Sure,"}],
               "continue_final_message": true})"),
      "m");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->continue_final_message);
  EXPECT_FALSE(r->add_generation_prompt);
  ExpectParamError(
      ReadChatRequest(Body(R"({"messages": [{"role": "assistant", "content": "Sure,"}],
                               "continue_final_message": true, "add_generation_prompt": true})"),
                      "m")
          .status(),
      "continue_final_message");
}

TEST(RewriteCoreError, NamesTheEndpointsParameter) {
  absl::Status chat = RewriteCoreError(
      absl::InvalidArgumentError("sampling.logprobs must be in [0, 20], got 30"), true);
  EXPECT_EQ(ErrorParam(chat), "top_logprobs");
  EXPECT_EQ(chat.message(), "top_logprobs must be in [0, 20], got 30");
  absl::Status ids = RewriteCoreError(
      absl::InvalidArgumentError("token_ids.ids[2] must be in [0, 100), got 500"), false);
  EXPECT_EQ(ErrorParam(ids), "prompt");
  EXPECT_EQ(ids.message(), "prompt[2] must be in [0, 100), got 500");
  absl::Status length = RewriteCoreError(
      absl::InvalidArgumentError(
          "prompt (10 tokens) + sampling.max_tokens (100) must be <= max_context (64)"),
      true);
  EXPECT_EQ(ErrorParam(length), "max_tokens");
  EXPECT_FALSE(absl::StrContains(length.message(), "sampling.")) << length;
  absl::Status queue = RewriteCoreError(absl::ResourceExhaustedError("queue full"), false);
  EXPECT_EQ(HttpStatusOf(queue), 429);
}

TEST(ErrorBody, IsOpenAisErrorObject) {
  const std::string body = ErrorBody(ParamError("top_p", "top_p must be in (0, 1], got 2"));
  EXPECT_EQ(body,
            R"({"error":{"code":400,"message":"top_p must be in (0, 1], got 2","param":"top_p","type":"invalid_request_error"}})");
  EXPECT_EQ(HttpStatusOf(absl::UnavailableError("x")), 503);
  EXPECT_EQ(HttpStatusOf(absl::UnauthenticatedError("x")), 401);
}

}  // namespace
}  // namespace tpserve
