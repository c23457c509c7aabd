// OpenAiApi over real HTTP (HttpServer on a free port), a real Engine and ServingCore,
// the Qwen2 tokenizer and Qwen2.5's real chat template, with a FakeStepExecutor that
// answers every sequence with a scripted text (then EOS): the answers' shapes, tool
// calls, errors with their HTTP statuses, and a client that disconnects.
#include "server/openai/openai_api.h"

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/http/http_server.h"
#include "server/http/http_test_client.h"
#include "server/testing/fake_step_executor.h"

namespace tpserve {
namespace {

using Json = nlohmann::json;

constexpr char kTemplate[] = "tests/chat_templates/Qwen-Qwen2.5-7B-Instruct.jinja";
constexpr char kToolCall[] =
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Options {
  std::string script = " The answer is 42.";
  std::string tool_parser;
  std::string reasoning_parser;
  const ApiKeys* keys = nullptr;
  absl::Duration step_delay = absl::ZeroDuration();
  int max_queue = 64;
  bool engine = true;
  absl::Duration http_timeouts = absl::Seconds(5);  // idle, request and write
  size_t prepare_bytes = size_t{256} << 20;
};

class OpenAiApiTest : public ::testing::Test {
 protected:
  void Start(const Options& o = {}) {
    absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
        Tokenizer::FromPath("tests/tokenizer/data/qwen2");
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = *std::move(tokenizer);
    absl::StatusOr<std::vector<int32_t>> eos = tokenizer_->Encode("<|im_end|>", false);
    ASSERT_TRUE(eos.ok() && eos->size() == 1);
    absl::StatusOr<std::vector<int32_t>> script = tokenizer_->Encode(o.script, false);
    ASSERT_TRUE(script.ok());
    FakeExecutorConfig fake{/*num_blocks=*/256, /*block_size=*/4};
    fake.vocab_size = tokenizer_->id_bound();
    fake.next_token = FakeStepExecutor::ScriptedAnswer(*script, (*eos)[0]);
    fake.step_delay = o.step_delay;
    executor_ = std::make_unique<FakeStepExecutor>(fake);
    EngineOptions engine_options;
    engine_options.limits.set_max_context(1024);
    engine_options.eos_token_ids = {(*eos)[0]};
    engine_options.vocab_size = tokenizer_->id_bound();
    engine_options.max_queue = o.max_queue;
    absl::StatusOr<std::unique_ptr<Engine>> engine =
        Engine::Create(engine_options, executor_.get(), tokenizer_.get());
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = std::move(*engine);
    engine_->Start();
    ServedModel model;
    model.architecture = "Qwen2ForCausalLM";
    model.model_path = "/models/qwen";
    model.model_name = "qwen";
    model.vocab_size = tokenizer_->id_bound();
    model.kv_block_size = 4;
    model.limits = MakeBatchLimits(1024, 2048, 64);
    model.max_queue = o.max_queue;
    core_ = std::make_unique<ServingCore>(model, tokenizer_.get());
    if (o.engine) core_->SetEngine(engine_);
    absl::StatusOr<std::unique_ptr<ChatTemplate>> chat = ChatTemplate::FromTexts(
        {{"default", ReadFile(kTemplate)}}, kTemplate, ChatSpecialTokens{std::nullopt, "<|im_end|>"});
    ASSERT_TRUE(chat.ok()) << chat.status();
    template_ = *std::move(chat);
    OpenAiApiOptions options;
    options.chat.chat_template = template_.get();
    options.chat.tool_call_parser = o.tool_parser;
    options.chat.reasoning_parser = o.reasoning_parser;
    options.chat.tool_call_ids = [n = 0]() mutable { return absl::StrCat("call_", n++); };
    options.api_keys = o.keys;
    options.max_queued_prepare_bytes = o.prepare_bytes;
    api_ = std::make_unique<OpenAiApi>(core_.get(), options);
    HttpRoutes routes;
    api_->AddRoutes(routes);
    HttpServerConfig http;
    http.idle_timeout = http.request_timeout = http.write_timeout = o.http_timeouts;
    absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start(http, std::move(routes));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  void TearDown() override {
    if (server_) server_->Stop();
    api_.reset();
    if (engine_) engine_->Stop();
  }

  RawHttpResponse Post(const std::string& path, const std::string& body,
                       const std::string& headers = "") {
    RawHttpConnection c(server_->port(), absl::Seconds(10));
    EXPECT_TRUE(c.Send(absl::StrCat("POST ", path, " HTTP/1.1\r\nHost: x\r\nContent-Type: "
                                    "application/json\r\nContent-Length: ",
                                    body.size(), "\r\nConnection: close\r\n", headers, "\r\n",
                                    body)));
    return c.ReadResponse();
  }

  // The data of each server-sent event of a streamed body.
  static std::vector<std::string> Events(const std::string& body) {
    std::vector<std::string> out;
    for (absl::string_view block : absl::StrSplit(body, "\n\n", absl::SkipEmpty())) {
      EXPECT_TRUE(absl::StartsWith(block, "data: ")) << block;
      out.emplace_back(block.substr(6));
    }
    return out;
  }

  // Nothing running or waiting, no KV block held, no generation open.
  void ExpectEverythingFreed() {
    for (int i = 0; i < 300; ++i) {
      const EngineStats s = engine_->stats();
      if (s.running + s.waiting == 0 && s.kv_blocks_in_use == 0 && core_->generating() == 0) break;
      absl::SleepFor(absl::Milliseconds(10));
    }
    EXPECT_EQ(engine_->stats().running + engine_->stats().waiting, 0);
    EXPECT_EQ(engine_->stats().kv_blocks_in_use, 0);
    EXPECT_EQ(core_->generating(), 0);
  }

  static std::string Chat(const std::string& extra = "") {
    return absl::StrCat(R"({"model": "qwen", "messages": [{"role": "user", "content": "Hi"}])",
                        extra, "}");
  }

  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<FakeStepExecutor> executor_;
  std::shared_ptr<Engine> engine_;
  std::unique_ptr<ServingCore> core_;
  std::unique_ptr<ChatTemplate> template_;
  std::unique_ptr<OpenAiApi> api_;
  std::unique_ptr<HttpServer> server_;
};

TEST_F(OpenAiApiTest, ChatCompletionWhole) {
  Start();
  RawHttpResponse r = Post("/v1/chat/completions", Chat(R"(, "return_token_ids": true)"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.header("content-type"), "application/json");
  const Json body = Json::parse(r.body);
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["model"], "qwen");
  EXPECT_TRUE(absl::StartsWith(body["id"].get<std::string>(), "chatcmpl-"));
  const Json& choice = body["choices"][0];
  EXPECT_EQ(choice["message"]["role"], "assistant");
  EXPECT_EQ(choice["message"]["content"], " The answer is 42.");
  EXPECT_EQ(choice["finish_reason"], "stop");
  // The rendered prompt (system default + user + the assistant header) was what ran.
  absl::StatusOr<std::vector<int32_t>> prompt = tokenizer_->Encode(
      "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
      "assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
      false);
  ASSERT_TRUE(prompt.ok());
  EXPECT_EQ(body["usage"]["prompt_tokens"], prompt->size());
  EXPECT_EQ(body["usage"]["completion_tokens"], choice["token_ids"].size());
}

TEST_F(OpenAiApiTest, ChatCompletionStreamed) {
  Start();
  RawHttpResponse r = Post("/v1/chat/completions",
                           Chat(R"(, "stream": true, "stream_options": {"include_usage": true})"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(absl::StartsWith(r.header("content-type"), "text/event-stream"));
  std::vector<std::string> events = Events(r.body);
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::string content;
  std::string finish;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    const Json e = Json::parse(events[i]);
    EXPECT_EQ(e["object"], "chat.completion.chunk");
    const Json& delta = e["choices"][0]["delta"];
    if (i == 0) { EXPECT_EQ(delta["role"], "assistant"); }
    if (delta.contains("content")) content += delta["content"].get<std::string>();
    if (!e["choices"][0]["finish_reason"].is_null()) finish = e["choices"][0]["finish_reason"];
    EXPECT_TRUE(e["usage"].is_null());
  }
  EXPECT_EQ(content, " The answer is 42.");
  EXPECT_EQ(finish, "stop");
  const Json usage = Json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_GT(usage["usage"]["completion_tokens"].get<int>(), 0);
}

TEST_F(OpenAiApiTest, ToolCallsAreParsedFromTheAnswer) {
  Start(Options{.script = kToolCall, .tool_parser = "hermes"});
  const std::string tools =
      R"(, "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])";
  RawHttpResponse whole = Post("/v1/chat/completions", Chat(tools));
  ASSERT_EQ(whole.status, 200) << whole.body;
  const Json choice = Json::parse(whole.body)["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_TRUE(choice["message"]["content"].is_null());
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
  const Json& call = choice["message"]["tool_calls"][0];
  EXPECT_EQ(call["id"], "call_0");
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(Json::parse(call["function"]["arguments"].get<std::string>()), Json({{"city", "Paris"}}));

  RawHttpResponse streamed = Post("/v1/chat/completions", Chat(tools + R"(, "stream": true)"));
  ASSERT_EQ(streamed.status, 200);
  std::string arguments;
  std::string name;
  std::string content;
  for (const std::string& e : Events(streamed.body)) {
    if (e == "[DONE]") continue;
    const Json delta = Json::parse(e)["choices"][0]["delta"];
    if (delta.contains("content")) content += delta["content"].get<std::string>();
    if (!delta.contains("tool_calls")) continue;
    for (const Json& d : delta["tool_calls"]) {
      if (d["function"].contains("name")) name = d["function"]["name"];
      arguments += d["function"]["arguments"].get<std::string>();
    }
  }
  EXPECT_EQ(content, "");  // the call is not content
  EXPECT_EQ(name, "get_weather");
  EXPECT_EQ(Json::parse(arguments), Json({{"city", "Paris"}}));
}

// tool_choice naming a function starts the answer as that call; the model writes the
// arguments (here the fake's script is only the rest of the call).
TEST_F(OpenAiApiTest, ANamedToolChoiceStartsTheAnswerAsThatCall) {
  Start(Options{.script = "{\"city\": \"Paris\"}}\n</tool_call>", .tool_parser = "hermes"});
  RawHttpResponse r = Post(
      "/v1/chat/completions",
      Chat(R"(, "tools": [{"type": "function", "function": {"name": "get_weather"}}, {"type": "function", "function": {"name": "other"}}],
              "tool_choice": {"type": "function", "function": {"name": "get_weather"}})"));
  ASSERT_EQ(r.status, 200) << r.body;
  const Json choice = Json::parse(r.body)["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << r.body;
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(Json::parse(choice["message"]["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            Json({{"city", "Paris"}}));
}

TEST_F(OpenAiApiTest, ToolsWithoutAParserAreRefusedByName) {
  Start();
  RawHttpResponse r = Post(
      "/v1/chat/completions",
      Chat(R"(, "tools": [{"type": "function", "function": {"name": "f"}}])"));
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(Json::parse(r.body)["error"]["param"], "tool_choice");
  RawHttpResponse none = Post(
      "/v1/chat/completions",
      Chat(R"(, "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "none")"));
  EXPECT_EQ(none.status, 200) << none.body;
}

TEST_F(OpenAiApiTest, CompletionsWithSeveralPromptsNAndLogprobs) {
  Start();
  RawHttpResponse r = Post("/v1/completions",
                           R"({"prompt": ["Hello", "Bye"], "n": 2, "max_tokens": 3, "logprobs": 2})");
  ASSERT_EQ(r.status, 200) << r.body;
  const Json body = Json::parse(r.body);
  EXPECT_EQ(body["object"], "text_completion");
  ASSERT_EQ(body["choices"].size(), 4u);
  for (int i = 0; i < 4; ++i) {
    const Json& c = body["choices"][i];
    EXPECT_EQ(c["index"], i);
    EXPECT_EQ(c["text"], " The answer is");
    EXPECT_EQ(c["finish_reason"], "length");
    EXPECT_EQ(c["logprobs"]["tokens"].size(), 3u);
    EXPECT_EQ(c["logprobs"]["text_offset"], Json::array({0, 4, 11}));
  }
  EXPECT_EQ(body["usage"]["completion_tokens"], 12);
}

TEST_F(OpenAiApiTest, CompletionsEchoAndTokenIdPrompts) {
  Start();
  absl::StatusOr<std::vector<int32_t>> ids = tokenizer_->Encode("Say:", false);
  ASSERT_TRUE(ids.ok());
  RawHttpResponse r = Post("/v1/completions", absl::StrCat(R"({"prompt": )", Json(*ids).dump(),
                                                           R"(, "max_tokens": 2, "echo": true})"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Json::parse(r.body)["choices"][0]["text"], "Say: The answer");
}

TEST_F(OpenAiApiTest, ErrorsCarryOpenAisObjectAndStatus) {
  Start(Options{.max_queue = 2});
  const struct {
    std::string path, body;
    int status;
    std::string param;
  } cases[] = {
      {"/v1/completions", "{not json", 400, ""},
      {"/v1/completions", R"({"prompt": "x", "temperature": -1})", 400, "temperature"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": 5000})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt": [999999999]})", 400, "prompt"},
      {"/v1/completions", R"({"model": "gpt-4o", "prompt": "x"})", 404, "model"},
      {"/v1/completions", R"({"prompt": "x", "n": 3})", 400, "n"},  // more than the queue
      {"/v1/chat/completions", R"({"messages": "hi"})", 400, "messages"},
      {"/v1/chat/completions", Chat(R"(, "top_logprobs": 3)"), 400, "top_logprobs"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.body);
    RawHttpResponse r = Post(c.path, c.body);
    EXPECT_EQ(r.status, c.status) << r.body;
    const Json error = Json::parse(r.body)["error"];
    EXPECT_FALSE(error["message"].get<std::string>().empty());
    EXPECT_EQ(error["code"], c.status);
    if (!c.param.empty()) { EXPECT_EQ(error["param"], c.param); }
  }
  RawHttpConnection get(server_->port());
  get.Send("GET /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(get.ReadResponse().status, 405);
}

TEST_F(OpenAiApiTest, AFullQueueIs429AndOthersAreServed) {
  Start(Options{.step_delay = absl::Milliseconds(20), .max_queue = 2});
  // Two long requests fill the queue (one runs, one waits at most).
  RawHttpConnection a(server_->port(), absl::Seconds(20));
  RawHttpConnection b(server_->port(), absl::Seconds(20));
  const std::string body = R"({"prompt": "x", "max_tokens": 30, "ignore_eos": true, "stream": true})";
  const std::string request = absl::StrCat("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: ",
                                           body.size(), "\r\n\r\n", body);
  ASSERT_TRUE(a.Send(request));
  ASSERT_TRUE(b.Send(request));
  ASSERT_EQ(a.ReadHead().status, 200);
  ASSERT_EQ(b.ReadHead().status, 200);
  int refused = 0;
  for (int i = 0; i < 3; ++i) refused += Post("/v1/completions", R"({"prompt": "y"})").status == 429;
  EXPECT_GE(refused, 1);
  a.Close();
  b.Close();
  ExpectEverythingFreed();
}

TEST_F(OpenAiApiTest, RequestBytesWaitingToBePreparedAreBounded) {
  Start(Options{.prepare_bytes = 64});
  EXPECT_EQ(Post("/v1/completions", R"({"prompt": "x"})").status, 200);
  RawHttpResponse big = Post("/v1/completions", absl::StrCat(R"({"prompt": ")",
                                                             std::string(100, 'a'), R"("})"));
  EXPECT_EQ(big.status, 503);
  EXPECT_EQ(Json::parse(big.body)["error"]["type"], "service_unavailable");
  EXPECT_EQ(Post("/v1/completions", R"({"prompt": "x"})").status, 200);  // nothing leaked
}

TEST_F(OpenAiApiTest, NotServingIs503AndHealthSaysSo) {
  Start(Options{.engine = false});
  EXPECT_EQ(Post("/v1/completions", R"({"prompt": "x"})").status, 503);
  EXPECT_EQ(HttpGet(server_->port(), "/health").status, 503);
  core_->SetEngine(engine_);
  EXPECT_EQ(HttpGet(server_->port(), "/health").status, 200);
}

TEST_F(OpenAiApiTest, ApiKeysAreRequiredExceptForHealthAndMetrics) {
  absl::StatusOr<ApiKeys> keys = ApiKeys::Parse("secret-key\n", "api-key-file", "keys");
  ASSERT_TRUE(keys.ok());
  Start(Options{.keys = &*keys});
  RawHttpResponse none = Post("/v1/completions", R"({"prompt": "x"})");
  EXPECT_EQ(none.status, 401);
  EXPECT_EQ(Json::parse(none.body)["error"]["type"], "authentication_error");
  EXPECT_EQ(Post("/v1/completions", R"({"prompt": "x"})", "Authorization: Bearer wrong\r\n").status, 401);
  EXPECT_EQ(Post("/v1/completions", R"({"prompt": "x"})", "Authorization: Bearer secret-key\r\n").status,
            200);
  EXPECT_EQ(HttpGet(server_->port(), "/v1/models").status, 401);
  EXPECT_EQ(HttpGet(server_->port(), "/health").status, 200);
  EXPECT_EQ(HttpGet(server_->port(), "/metrics").status, 200);
}

TEST_F(OpenAiApiTest, AClientThatDisconnectsCancelsAndFreesItsKv) {
  Start(Options{.step_delay = absl::Milliseconds(5)});
  for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
    SCOPED_TRACE(path);
    const std::string body = std::string(path) == "/v1/completions"
                                 ? R"({"prompt": "x", "max_tokens": 500, "ignore_eos": true, "stream": true})"
                                 : Chat(R"(, "max_tokens": 500, "ignore_eos": true, "stream": true)");
    RawHttpConnection c(server_->port(), absl::Seconds(10));
    ASSERT_TRUE(c.Send(absl::StrCat("POST ", path, " HTTP/1.1\r\nHost: x\r\nContent-Length: ",
                                    body.size(), "\r\n\r\n", body)));
    ASSERT_EQ(c.ReadHead().status, 200);
    ASSERT_TRUE(c.ReadChunk().has_value());
    // The engine publishes its figures right after the step whose chunk arrived.
    for (int i = 0; i < 100 && engine_->stats().kv_blocks_in_use == 0; ++i) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    EXPECT_GT(engine_->stats().kv_blocks_in_use, 0);
    c.Close();
    ExpectEverythingFreed();
  }
  // The same for a request still being answered whole.
  RawHttpConnection whole(server_->port(), absl::Seconds(10));
  const std::string body = R"({"prompt": "x", "max_tokens": 500, "ignore_eos": true})";
  ASSERT_TRUE(whole.Send(absl::StrCat("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: ",
                                      body.size(), "\r\n\r\n", body)));
  absl::SleepFor(absl::Milliseconds(100));
  whole.Close();
  ExpectEverythingFreed();
}

// A generation longer than every HTTP timeout: neither the whole answer (nothing is
// written until the end) nor a stream that pauses between events is cut.
TEST_F(OpenAiApiTest, AnswersSlowerThanTheHttpTimeoutsStillArrive) {
  Start(Options{.step_delay = absl::Milliseconds(30), .http_timeouts = absl::Milliseconds(500)});
  RawHttpResponse whole = Post("/v1/completions",
                               R"({"prompt": "x", "max_tokens": 60, "ignore_eos": true})");
  ASSERT_EQ(whole.status, 200) << whole.body;
  EXPECT_EQ(Json::parse(whole.body)["usage"]["completion_tokens"], 60);
  RawHttpResponse streamed = Post(
      "/v1/completions", R"({"prompt": "x", "max_tokens": 60, "ignore_eos": true, "stream": true})");
  ASSERT_EQ(streamed.status, 200);
  EXPECT_EQ(Events(streamed.body).back(), "[DONE]");
}

TEST_F(OpenAiApiTest, ModelsTokenizeAndDetokenize) {
  Start();
  RawHttpResponse models = HttpGet(server_->port(), "/v1/models");
  ASSERT_EQ(models.status, 200);
  const Json m = Json::parse(models.body);
  EXPECT_EQ(m["object"], "list");
  EXPECT_EQ(m["data"][0]["id"], "qwen");
  EXPECT_EQ(m["data"][0]["max_model_len"], 1024);
  RawHttpResponse one = HttpGet(server_->port(), "/v1/models/qwen");
  ASSERT_EQ(one.status, 200);
  EXPECT_EQ(Json::parse(one.body)["id"], "qwen");
  RawHttpResponse other = HttpGet(server_->port(), "/v1/models/gpt-4");
  EXPECT_EQ(other.status, 404);
  EXPECT_EQ(Json::parse(other.body)["error"]["type"], "not_found_error");
  EXPECT_EQ(Json::parse(HttpGet(server_->port(), "/v1/embeddings").body)["error"]["code"], 404);

  RawHttpResponse t = Post("/tokenize", R"({"prompt": "Hello world"})");
  ASSERT_EQ(t.status, 200) << t.body;
  const Json tokens = Json::parse(t.body);
  EXPECT_EQ(tokens["count"], tokens["tokens"].size());
  RawHttpResponse d = Post("/detokenize", absl::StrCat(R"({"tokens": )", tokens["tokens"].dump(), "}"));
  ASSERT_EQ(d.status, 200) << d.body;
  EXPECT_EQ(Json::parse(d.body)["prompt"], "Hello world");

  RawHttpResponse chat = Post("/tokenize", R"({"messages": [{"role": "user", "content": "Hi"}]})");
  ASSERT_EQ(chat.status, 200) << chat.body;
  EXPECT_GT(Json::parse(chat.body)["count"].get<int>(), 10);  // the template's system turn too
  EXPECT_EQ(Post("/detokenize", R"({"tokens": [-1]})").status, 400);
}

}  // namespace
}  // namespace tpserve
