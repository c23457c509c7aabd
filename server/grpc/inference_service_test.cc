// InferenceService over a real Engine and a FakeStepExecutor, through a real gRPC
// channel on a free local port.
#include "server/grpc/inference_service.h"

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/testing/fake_step_executor.h"

namespace tpserve {
namespace {

constexpr int kVocab = 1000;
constexpr int kContext = 64;

ServedModel Model(int vocab_size) {
  ServedModel m;
  m.architecture = "LlamaForCausalLM";
  m.model_path = "/models/tiny";
  m.model_name = "tiny";
  m.vocab_size = vocab_size;
  m.tp = 2;
  m.dtype = "float32";
  m.device = "cpu";
  m.kv_block_size = 4;
  m.limits = MakeBatchLimits(kContext, 256, 8);
  m.max_queue = 12;
  return m;
}

std::vector<int32_t> Expected(std::vector<int32_t> history, int n) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(FakeStepExecutor::HashNextToken(history, kVocab));
    history.push_back(out.back());
  }
  return out;
}

v1::GenerateRequest IdsRequest(std::vector<int32_t> ids, int max_tokens) {
  v1::GenerateRequest r;
  r.mutable_token_ids()->mutable_ids()->Add(ids.begin(), ids.end());
  r.mutable_sampling()->set_max_tokens(max_tokens);
  r.mutable_sampling()->set_temperature(0);
  return r;
}

class ServiceTest : public ::testing::Test {
 protected:
  void Start(FakeExecutorConfig fake = {}, const Tokenizer* tokenizer = nullptr) {
    fake.vocab_size = vocab_size_;
    executor_ = std::make_unique<FakeStepExecutor>(fake);
    EngineOptions options;
    options.limits.set_max_context(kContext);
    options.eos_token_ids = {};
    absl::StatusOr<std::unique_ptr<Engine>> engine =
        Engine::Create(options, executor_.get(), tokenizer);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = std::move(*engine);
    engine_->Start();
    core_ = std::make_unique<ServingCore>(Model(vocab_size_), tokenizer);
    core_->SetEngine(engine_);
    service_ = std::make_unique<InferenceService>(core_.get());
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = v1::Inference::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    if (server_) server_->Shutdown();
    if (engine_) engine_->Stop();
  }

  grpc::Status Stream(const v1::GenerateRequest& request,
                      std::vector<v1::GenerateResponse>* chunks) {
    grpc::ClientContext context;
    auto reader = stub_->Generate(&context, request);
    v1::GenerateResponse chunk;
    while (reader->Read(&chunk)) chunks->push_back(chunk);
    return reader->Finish();
  }

  // Cancels `request`'s stream after its first chunk; the call is CANCELLED and the
  // engine ends up with nothing running or waiting and no KV block held.
  void ExpectCancelAbortsEverything(const v1::GenerateRequest& request) {
    grpc::ClientContext context;
    auto reader = stub_->Generate(&context, request);
    v1::GenerateResponse chunk;
    ASSERT_TRUE(reader->Read(&chunk));
    context.TryCancel();
    while (reader->Read(&chunk)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::CANCELLED);
    for (int i = 0; i < 200 && engine_->stats().running + engine_->stats().waiting > 0; ++i) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    EXPECT_EQ(engine_->stats().running + engine_->stats().waiting, 0);
    EXPECT_EQ(engine_->stats().kv_blocks_in_use, 0);
  }

  int vocab_size_ = kVocab;
  std::unique_ptr<FakeStepExecutor> executor_;
  std::shared_ptr<Engine> engine_;
  std::unique_ptr<ServingCore> core_;
  std::unique_ptr<InferenceService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Inference::Stub> stub_;
};

TEST_F(ServiceTest, GenerateStreamsEveryTokenAndEndsWithUsage) {
  Start();
  std::vector<v1::GenerateResponse> chunks;
  const grpc::Status status = Stream(IdsRequest({5, 6, 7}, 6), &chunks);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_FALSE(chunks.empty());
  std::vector<int32_t> ids;
  for (const auto& c : chunks) ids.insert(ids.end(), c.token_ids().begin(), c.token_ids().end());
  EXPECT_EQ(ids, Expected({5, 6, 7}, 6));
  EXPECT_EQ(chunks.back().finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(chunks.back().usage().prompt_tokens(), 3);
  EXPECT_EQ(chunks.back().usage().completion_tokens(), 6);
  for (size_t i = 0; i + 1 < chunks.size(); ++i) {
    EXPECT_EQ(chunks[i].finish_reason(), v1::FINISH_REASON_UNSPECIFIED);
  }
}

TEST_F(ServiceTest, UnaryCollectsTheWholeAnswerAndUnsetMaxTokensFillsTheContext) {
  Start();
  grpc::ClientContext context;
  v1::GenerateRequest request = IdsRequest({1, 2}, 5);
  request.mutable_sampling()->set_logprobs(2);
  v1::GenerateResponse response;
  ASSERT_TRUE(stub_->GenerateUnary(&context, request, &response).ok());
  EXPECT_EQ(std::vector<int32_t>(response.token_ids().begin(), response.token_ids().end()),
            Expected({1, 2}, 5));
  EXPECT_EQ(response.logprobs_size(), 5);
  EXPECT_EQ(response.usage().completion_tokens(), 5);

  request.mutable_sampling()->clear_max_tokens();
  grpc::ClientContext context2;
  ASSERT_TRUE(stub_->GenerateUnary(&context2, request, &response).ok());
  EXPECT_EQ(response.usage().completion_tokens(), kContext - 2);
}

// A request must fit in the KV cache alone: a cache of fewer tokens than max_context is
// the context a request gets (unset max_tokens fills it; more is refused naming it),
// and GetModelInfo says so.
TEST_F(ServiceTest, AKvCacheSmallerThanTheContextIsTheLimit) {
  FakeExecutorConfig fake;
  fake.num_blocks = 6;  // 6 × 4 = 24 tokens < kContext
  Start(fake);
  constexpr int kCacheTokens = 24;
  grpc::ClientContext info_context;
  v1::ModelInfo info;
  ASSERT_TRUE(stub_->GetModelInfo(&info_context, {}, &info).ok());
  EXPECT_EQ(info.max_context(), kCacheTokens);

  v1::GenerateRequest request = IdsRequest({1, 2, 3}, 5);
  request.mutable_sampling()->clear_max_tokens();
  grpc::ClientContext context;
  v1::GenerateResponse response;
  const grpc::Status unset = stub_->GenerateUnary(&context, request, &response);
  ASSERT_TRUE(unset.ok()) << unset.error_message();
  EXPECT_EQ(response.usage().completion_tokens(), kCacheTokens - 3);
  EXPECT_EQ(response.finish_reason(), v1::FINISH_REASON_LENGTH);

  request.mutable_sampling()->set_max_tokens(kCacheTokens - 2);
  grpc::ClientContext too_long;
  const grpc::Status refused = stub_->GenerateUnary(&too_long, request, &response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(refused.error_message(),
            "prompt (3 tokens) + sampling.max_tokens (22) must be <= max_context (the KV "
            "cache's capacity) (24)");
}

TEST_F(ServiceTest, BadRequestsAreInvalidArgumentAndTheServerKeepsServing) {
  Start();
  v1::GenerateRequest bad = IdsRequest({1, 2}, 4);
  bad.mutable_sampling()->set_top_p(2);
  std::vector<v1::GenerateResponse> chunks;
  grpc::Status status = Stream(bad, &chunks);
  EXPECT_EQ(status.error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("sampling.top_p"), std::string::npos);
  status = Stream(IdsRequest({1, kVocab}, 4), &chunks);
  EXPECT_EQ(status.error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("token_ids.ids[1]"), std::string::npos);
  status = Stream(IdsRequest({1, 2}, kContext), &chunks);
  EXPECT_EQ(status.error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("max_context (64)"), std::string::npos);
  v1::GenerateRequest text;
  text.set_text("hello");
  status = Stream(text, &chunks);
  EXPECT_EQ(status.error_code(), grpc::FAILED_PRECONDITION);
  EXPECT_TRUE(chunks.empty());
  EXPECT_TRUE(Stream(IdsRequest({1, 2}, 2), &chunks).ok());
}

TEST_F(ServiceTest, CancellingTheCallAbortsTheRequestInTheEngine) {
  FakeExecutorConfig slow;
  slow.step_delay = absl::Milliseconds(20);
  Start(slow);
  ExpectCancelAbortsEverything(IdsRequest({3}, 60));
}

TEST_F(ServiceTest, NCompletionsStreamInterleavedEachTaggedAndWhole) {
  Start();
  v1::GenerateRequest request = IdsRequest({5, 6, 7, 8, 9, 10, 11, 12, 13}, 6);
  request.mutable_sampling()->set_n(3);
  request.mutable_sampling()->set_prompt_logprobs(0);
  std::vector<v1::GenerateResponse> chunks;
  const grpc::Status status = Stream(request, &chunks);
  ASSERT_TRUE(status.ok()) << status.error_message();
  std::vector<std::vector<int32_t>> ids(3);
  std::vector<int> finished(3, 0), prompt_logprobs(3, 0);
  for (const auto& c : chunks) {
    ASSERT_GE(c.index(), 0);
    ASSERT_LT(c.index(), 3);
    EXPECT_EQ(finished[c.index()], 0) << "a chunk after its completion's last";
    ids[c.index()].insert(ids[c.index()].end(), c.token_ids().begin(), c.token_ids().end());
    prompt_logprobs[c.index()] += c.prompt_logprobs_size();
    if (c.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
      ++finished[c.index()];
      EXPECT_EQ(c.usage().completion_tokens(), 6);
    }
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(ids[i], Expected({5, 6, 7, 8, 9, 10, 11, 12, 13}, 6)) << i;
    EXPECT_EQ(finished[i], 1) << i;
  }
  EXPECT_EQ(prompt_logprobs, (std::vector<int>{9, 0, 0}));  // completion 0's only
}

TEST_F(ServiceTest, UnaryWithNReturnsChoicesAndBadNIsRefused) {
  Start();
  v1::GenerateRequest request = IdsRequest({1, 2, 3, 4, 5, 6}, 4);
  request.mutable_sampling()->set_n(4);
  {
    grpc::ClientContext context;
    v1::GenerateResponse response;
    const grpc::Status status = stub_->GenerateUnary(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.token_ids_size(), 0);  // the answer is in choices
    ASSERT_EQ(response.choices_size(), 4);
    int cached = 0;
    for (int i = 0; i < 4; ++i) {
      const v1::GenerateResponse& choice = response.choices(i);
      EXPECT_EQ(choice.index(), i);
      EXPECT_EQ(std::vector<int32_t>(choice.token_ids().begin(), choice.token_ids().end()),
                Expected({1, 2, 3, 4, 5, 6}, 4));
      EXPECT_EQ(choice.finish_reason(), v1::FINISH_REASON_LENGTH);
      EXPECT_EQ(choice.usage().prompt_tokens(), 6);
      cached += choice.usage().cached_prompt_tokens();
    }
    EXPECT_EQ(cached, 3 * 4);  // the others share completion 0's whole block
  }
  for (int n : {0, 13, 17}) {  // 13: past the server's max_queue (12)
    request.mutable_sampling()->set_n(n);
    grpc::ClientContext context;
    v1::GenerateResponse response;
    const grpc::Status status = stub_->GenerateUnary(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::INVALID_ARGUMENT) << n;
    EXPECT_NE(status.error_message().find("sampling.n"), std::string::npos)
        << status.error_message();
    EXPECT_NE(status.error_message().find(n == 13 ? "max_queue (12)" : "16"), std::string::npos)
        << status.error_message();
  }
}

TEST_F(ServiceTest, CancellingACallOfNCompletionsAbortsThemAll) {
  FakeExecutorConfig slow;
  slow.step_delay = absl::Milliseconds(20);
  Start(slow);
  v1::GenerateRequest request = IdsRequest({3}, 60);
  request.mutable_sampling()->set_n(5);
  ExpectCancelAbortsEverything(request);
}

TEST_F(ServiceTest, DeadlineIsDeadlineExceeded) {
  FakeExecutorConfig slow;
  slow.step_delay = absl::Milliseconds(20);
  Start(slow);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
  v1::GenerateResponse response;
  const grpc::Status status = stub_->GenerateUnary(&context, IdsRequest({3}, 60), &response);
  EXPECT_EQ(status.error_code(), grpc::DEADLINE_EXCEEDED);
}

TEST_F(ServiceTest, ExecutorFailureIsUnavailable) {
  FakeExecutorConfig failing;
  failing.fail_at_step = 3;
  Start(failing);
  std::vector<v1::GenerateResponse> chunks;
  EXPECT_EQ(Stream(IdsRequest({3}, 10), &chunks).error_code(), grpc::UNAVAILABLE);
  core_->SetEngine(nullptr);
  EXPECT_EQ(Stream(IdsRequest({3}, 10), &chunks).error_code(), grpc::UNAVAILABLE);
}

// A rebuilt pool brings a new engine whose counters start at 0; GetModelInfo's cover the
// server's life.
TEST_F(ServiceTest, StepCountersSpanEveryEngine) {
  Start();
  auto steps = [&] {
    grpc::ClientContext context;
    v1::ModelInfo info;
    EXPECT_TRUE(stub_->GetModelInfo(&context, {}, &info).ok());
    return info;
  };
  std::vector<v1::GenerateResponse> chunks;
  ASSERT_TRUE(Stream(IdsRequest({3}, 6), &chunks).ok());
  const v1::ModelInfo first = steps();
  ASSERT_GT(first.engine_steps(), 0u);
  ASSERT_GT(first.step_wall_us(), 0);

  FakeStepExecutor second_executor(FakeExecutorConfig{});
  EngineOptions options;
  options.limits.set_max_context(kContext);
  absl::StatusOr<std::unique_ptr<Engine>> made =
      Engine::Create(options, &second_executor, nullptr);
  ASSERT_TRUE(made.ok()) << made.status();
  std::shared_ptr<Engine> second = std::move(*made);
  second->Start();
  core_->SetEngine(second);
  EXPECT_EQ(steps().engine_steps(), first.engine_steps());
  EXPECT_EQ(steps().step_wall_us(), first.step_wall_us());
  ASSERT_TRUE(Stream(IdsRequest({4}, 6), &chunks).ok());
  EXPECT_GT(steps().engine_steps(), first.engine_steps());
  core_->SetEngine(nullptr);  // no pool: the counters stay, no blocks
  EXPECT_GT(steps().engine_steps(), first.engine_steps());
  EXPECT_EQ(steps().kv_blocks_total(), 0);
  second->Stop();
}

TEST_F(ServiceTest, ModelInfo) {
  Start();
  grpc::ClientContext context;
  v1::ModelInfo info;
  ASSERT_TRUE(stub_->GetModelInfo(&context, {}, &info).ok());
  EXPECT_EQ(info.architecture(), "LlamaForCausalLM");
  EXPECT_EQ(info.model_path(), "/models/tiny");
  EXPECT_EQ(info.model_name(), "tiny");
  EXPECT_EQ(info.vocab_size(), kVocab);
  EXPECT_EQ(info.max_context(), kContext);
  EXPECT_EQ(info.tp(), 2);
  EXPECT_EQ(info.dtype(), "float32");
  EXPECT_EQ(info.device(), "cpu");
  EXPECT_EQ(info.kv_block_size(), 4);
  EXPECT_EQ(info.max_batch_tokens(), 256);
  EXPECT_EQ(info.max_sequences(), 8);
  EXPECT_EQ(info.engine_steps(), 0u);
  EXPECT_EQ(info.preemptions(), 0u);
  EXPECT_EQ(info.kv_blocks_total(), FakeExecutorConfig{}.num_blocks);
  EXPECT_EQ(info.kv_blocks_in_use(), 0);
}

TEST_F(ServiceTest, TokenizeAndDetokenize) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      Tokenizer::FromPath("tests/tokenizer/data/gpt2");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  vocab_size_ = (*tokenizer)->id_bound();
  Start({}, tokenizer->get());
  grpc::ClientContext c1;
  v1::TokenizeRequest tokenize;
  tokenize.set_text("Hello world");
  v1::TokenizeResponse ids;
  ASSERT_TRUE(stub_->Tokenize(&c1, tokenize, &ids).ok());
  ASSERT_FALSE(ids.token_ids().empty());
  grpc::ClientContext c2;
  v1::DetokenizeRequest detokenize;
  *detokenize.mutable_token_ids() = ids.token_ids();
  v1::DetokenizeResponse text;
  ASSERT_TRUE(stub_->Detokenize(&c2, detokenize, &text).ok());
  EXPECT_EQ(text.text(), "Hello world");
  grpc::ClientContext c3;
  detokenize.add_token_ids(vocab_size_);
  const grpc::Status bad = stub_->Detokenize(&c3, detokenize, &text);
  EXPECT_EQ(bad.error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_NE(bad.error_message().find("token_ids["), std::string::npos);
}

// The Chat RPCs: the Qwen2 tokenizer and Qwen2.5's real template, a fake that answers
// with a Hermes tool call, and the hermes parser.
class ChatServiceTest : public ::testing::Test {
 protected:
  void Start(const std::string& answer, const std::string& tool_parser,
             const std::string& template_path =
                 "tests/chat_templates/Qwen-Qwen2.5-7B-Instruct.jinja") {
    absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
        Tokenizer::FromPath("tests/tokenizer/data/qwen2");
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = *std::move(tokenizer);
    const std::vector<int32_t> eos = *tokenizer_->Encode("<|im_end|>", false);
    FakeExecutorConfig fake;
    fake.num_blocks = 256;
    fake.vocab_size = tokenizer_->id_bound();
    fake.next_token = FakeStepExecutor::ScriptedAnswer(*tokenizer_->Encode(answer, false), eos[0]);
    executor_ = std::make_unique<FakeStepExecutor>(fake);
    EngineOptions options;
    options.limits.set_max_context(1024);
    options.eos_token_ids = eos;
    engine_ = *Engine::Create(options, executor_.get(), tokenizer_.get());
    engine_->Start();
    ServedModel model = Model(tokenizer_->id_bound());
    model.limits = MakeBatchLimits(1024, 256, 8);
    core_ = std::make_unique<ServingCore>(model, tokenizer_.get());
    core_->SetEngine(engine_);
    if (!template_path.empty()) {
      std::ifstream in(template_path);
      std::stringstream text;
      text << in.rdbuf();
      template_ = *ChatTemplate::FromTexts({{"default", text.str()}}, template_path, {});
    }
    service_ = std::make_unique<InferenceService>(
        core_.get(), ChatConfig{template_.get(), tool_parser, "", [n = 0]() mutable {
                                  return "call_" + std::to_string(n++);
                                }});
    grpc::ServerBuilder builder;
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    stub_ = v1::Inference::NewStub(server_->InProcessChannel({}));
  }

  void TearDown() override {
    if (server_) server_->Shutdown();
    if (engine_) engine_->Stop();
  }

  static v1::ChatRequest WeatherChat() {
    v1::ChatRequest r;
    v1::ChatMessage* user = r.add_messages();
    user->set_role("user");
    user->set_content("Weather in Paris?");
    v1::Tool* tool = r.add_tools();
    tool->set_name("get_weather");
    tool->set_parameters_json(R"({"type": "object", "properties": {"city": {"type": "string"}}})");
    r.mutable_sampling()->set_temperature(0);
    r.mutable_sampling()->set_max_tokens(64);
    return r;
  }

  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<FakeStepExecutor> executor_;
  std::shared_ptr<Engine> engine_;
  std::unique_ptr<ServingCore> core_;
  std::unique_ptr<ChatTemplate> template_;
  std::unique_ptr<InferenceService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Inference::Stub> stub_;
};

constexpr char kWeatherCall[] =
    "Checking.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
    "</tool_call>";

TEST_F(ChatServiceTest, ChatStreamsContentThenTheToolCall) {
  Start(kWeatherCall, "hermes");
  grpc::ClientContext context;
  auto reader = stub_->Chat(&context, WeatherChat());
  v1::ChatResponse chunk;
  std::string content;
  std::string name;
  std::string arguments;
  v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
  int completion_tokens = 0;
  while (reader->Read(&chunk)) {
    content += chunk.content();
    for (const v1::ToolCallDelta& d : chunk.tool_calls()) {
      EXPECT_EQ(d.index(), 0);
      if (!d.name().empty()) {
        name = d.name();
        EXPECT_EQ(d.id(), "call_0");
      }
      arguments += d.arguments_json();
    }
    if (chunk.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
      finish = chunk.finish_reason();
      completion_tokens = chunk.usage().completion_tokens();
    }
  }
  const grpc::Status status = reader->Finish();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(content, "Checking.");
  EXPECT_EQ(name, "get_weather");
  EXPECT_EQ(arguments, R"({"city": "Paris"})");
  EXPECT_EQ(finish, v1::FINISH_REASON_TOOL_CALLS);
  EXPECT_GT(completion_tokens, 10);
}

TEST_F(ChatServiceTest, ChatUnaryListsWholeCallsAndChoices) {
  Start(kWeatherCall, "hermes");
  grpc::ClientContext context;
  v1::ChatRequest request = WeatherChat();
  request.mutable_sampling()->set_n(2);
  v1::ChatResponse response;
  const grpc::Status status = stub_->ChatUnary(&context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.choices_size(), 2);
  for (const v1::ChatResponse& choice : response.choices()) {
    EXPECT_EQ(choice.content(), "Checking.");
    ASSERT_EQ(choice.tool_calls_size(), 1);
    EXPECT_EQ(choice.tool_calls(0).name(), "get_weather");
    EXPECT_EQ(choice.tool_calls(0).arguments_json(), R"({"city": "Paris"})");
    EXPECT_EQ(choice.finish_reason(), v1::FINISH_REASON_TOOL_CALLS);
    EXPECT_FALSE(choice.token_ids().empty());
  }
}

TEST_F(ChatServiceTest, BadChatsAreRefusedByField) {
  Start("Hello.", "");
  const auto call = [&](const v1::ChatRequest& r) {
    grpc::ClientContext context;
    v1::ChatResponse response;
    return stub_->ChatUnary(&context, r, &response);
  };
  // Tools, but no --tool-call-parser: tool_choice must be "none".
  grpc::Status status = call(WeatherChat());
  EXPECT_EQ(status.error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("tool_choice"), std::string::npos) << status.error_message();
  v1::ChatRequest none = WeatherChat();
  none.set_tool_choice("none");
  status = call(none);
  EXPECT_TRUE(status.ok()) << status.error_message();

  v1::ChatRequest bad_schema = WeatherChat();
  bad_schema.set_tool_choice("none");
  bad_schema.mutable_tools(0)->set_parameters_json("{nope");
  status = call(bad_schema);
  EXPECT_EQ(status.error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("tools[0].parameters_json"), std::string::npos);

  v1::ChatRequest bad_role = none;
  bad_role.mutable_messages(0)->set_role("wizard");
  status = call(bad_role);
  EXPECT_EQ(status.error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("messages[0].role"), std::string::npos);

  v1::ChatRequest empty;
  EXPECT_EQ(call(empty).error_code(), grpc::INVALID_ARGUMENT);

  v1::ChatRequest hot = none;
  hot.mutable_sampling()->set_temperature(-1);
  EXPECT_EQ(call(hot).error_code(), grpc::INVALID_ARGUMENT);
}

TEST_F(ChatServiceTest, AModelWithoutATemplateRefusesChats) {
  Start("Hello.", "", "");
  grpc::ClientContext context;
  v1::ChatRequest r = WeatherChat();
  r.clear_tools();
  v1::ChatResponse response;
  const grpc::Status status = stub_->ChatUnary(&context, r, &response);
  EXPECT_EQ(status.error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("chat template"), std::string::npos);
}

}  // namespace
}  // namespace tpserve
