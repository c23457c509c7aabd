// Round trips of the API messages, with the presence rules the servers rely on: proto3
// `optional` fields keep "unset" apart from the zero value, oneofs hold one member,
// and the RPC shapes (streaming or not) are what the comments promise.
#include <string>

#include "gtest/gtest.h"
#include "tpserve/v1/inference.grpc.pb.h"
#include "tpserve/v1/inference.pb.h"
#include "tpserve/v1/request_utf8.h"
#include "tpserve/v1/worker.grpc.pb.h"
#include "tpserve/v1/worker.pb.h"

namespace tpserve {
namespace {

template <typename Message>
Message RoundTrip(const Message& in) {
  std::string bytes;
  EXPECT_TRUE(in.SerializeToString(&bytes));
  Message out;
  EXPECT_TRUE(out.ParseFromString(bytes));
  return out;
}

TEST(InferenceProto, PromptIsOneOf) {
  v1::GenerateRequest request;
  EXPECT_EQ(request.prompt_case(), v1::GenerateRequest::PROMPT_NOT_SET);
  request.set_text("Hello");
  request.mutable_token_ids()->add_ids(1);
  request.mutable_token_ids()->add_ids(15043);
  // Setting token_ids replaced the text.
  v1::GenerateRequest parsed = RoundTrip(request);
  ASSERT_EQ(parsed.prompt_case(), v1::GenerateRequest::kTokenIds);
  EXPECT_FALSE(parsed.has_text());
  EXPECT_EQ(parsed.token_ids().ids_size(), 2);
  EXPECT_EQ(parsed.token_ids().ids(1), 15043);

  parsed.set_text("");
  v1::GenerateRequest empty_text = RoundTrip(parsed);
  // An empty string still marks the text member as chosen.
  EXPECT_EQ(empty_text.prompt_case(), v1::GenerateRequest::kText);
}

TEST(InferenceProto, OptionalSamplingFieldsKeepUnsetApartFromZero) {
  v1::GenerateRequest unset;
  unset.set_text("x");
  v1::GenerateRequest parsed = RoundTrip(unset);
  const v1::SamplingParams& defaults = parsed.sampling();
  EXPECT_FALSE(parsed.has_sampling());
  EXPECT_FALSE(defaults.has_max_tokens());
  EXPECT_FALSE(defaults.has_temperature());
  EXPECT_FALSE(defaults.has_top_p());
  EXPECT_FALSE(defaults.has_repetition_penalty());
  EXPECT_FALSE(defaults.has_seed());
  EXPECT_FALSE(defaults.has_logprobs());
  EXPECT_FALSE(defaults.has_prompt_logprobs());
  EXPECT_FALSE(parsed.has_add_special_tokens());
  EXPECT_FALSE(parsed.has_skip_special_tokens());

  v1::GenerateRequest zeros;
  zeros.set_text("x");
  v1::SamplingParams* s = zeros.mutable_sampling();
  s->set_temperature(0.0f);  // greedy, not "default temperature"
  s->set_seed(0);
  s->set_logprobs(0);  // the chosen token's logprob only
  zeros.set_add_special_tokens(false);
  parsed = RoundTrip(zeros);
  EXPECT_TRUE(parsed.sampling().has_temperature());
  EXPECT_EQ(parsed.sampling().temperature(), 0.0f);
  EXPECT_TRUE(parsed.sampling().has_seed());
  EXPECT_TRUE(parsed.sampling().has_logprobs());
  EXPECT_EQ(parsed.sampling().logprobs(), 0);
  EXPECT_FALSE(parsed.sampling().has_max_tokens());
  EXPECT_TRUE(parsed.has_add_special_tokens());
  EXPECT_FALSE(parsed.add_special_tokens());

  parsed.mutable_sampling()->clear_temperature();
  EXPECT_FALSE(RoundTrip(parsed).sampling().has_temperature());
}

TEST(InferenceProto, LastChunkCarriesFinishReasonAndUsage) {
  v1::GenerateResponse chunk;
  chunk.add_token_ids(42);
  chunk.set_text(" world");
  v1::TokenLogprob* lp = chunk.add_logprobs();
  lp->set_token_id(42);
  lp->set_logprob(-0.25f);
  v1::TopLogprob* top = lp->add_top();
  top->set_token_id(42);
  top->set_logprob(-0.25f);
  top->set_text(" world");
  v1::GenerateResponse parsed = RoundTrip(chunk);
  EXPECT_EQ(parsed.finish_reason(), v1::FINISH_REASON_UNSPECIFIED);
  EXPECT_FALSE(parsed.has_usage());
  EXPECT_EQ(parsed.logprobs(0).top(0).text(), " world");

  chunk.set_finish_reason(v1::FINISH_REASON_EOS);
  chunk.mutable_usage()->set_prompt_tokens(5);
  chunk.mutable_usage()->set_completion_tokens(1);
  parsed = RoundTrip(chunk);
  EXPECT_EQ(parsed.finish_reason(), v1::FINISH_REASON_EOS);
  ASSERT_TRUE(parsed.has_usage());
  EXPECT_EQ(parsed.usage().prompt_tokens(), 5);
  EXPECT_EQ(parsed.usage().completion_tokens(), 1);
}

TEST(InferenceProto, ServiceShape) {
  const google::protobuf::ServiceDescriptor* service =
      v1::GenerateRequest::descriptor()->file()->FindServiceByName("Inference");
  ASSERT_NE(service, nullptr);
  EXPECT_EQ(service->full_name(), "tpserve.v1.Inference");
  EXPECT_STREQ(v1::Inference::service_full_name(), "tpserve.v1.Inference");
  const auto* generate = service->FindMethodByName("Generate");
  ASSERT_NE(generate, nullptr);
  EXPECT_TRUE(generate->server_streaming());
  EXPECT_FALSE(generate->client_streaming());
  for (const char* unary : {"GenerateUnary", "Tokenize", "Detokenize", "GetModelInfo"}) {
    const auto* method = service->FindMethodByName(unary);
    ASSERT_NE(method, nullptr) << unary;
    EXPECT_FALSE(method->server_streaming()) << unary;
    EXPECT_FALSE(method->client_streaming()) << unary;
  }
}

worker::v1::StepPlan ExamplePlan() {
  worker::v1::StepPlan plan;
  plan.set_step(7);
  plan.add_drop_seq_ids(3);
  worker::v1::NewSequence* fresh = plan.add_new_sequences();
  fresh->set_seq_id(11);
  for (int id : {1, 450, 4996}) fresh->add_token_ids(id);
  fresh->mutable_sampling()->set_temperature(0.7f);
  fresh->mutable_sampling()->set_seed(1234);
  fresh->mutable_sampling()->set_logprobs(-1);
  fresh->mutable_sampling()->set_prompt_logprobs(2);
  fresh->add_block_table(5);
  fresh->set_num_new_tokens(3);
  worker::v1::SequenceDelta* running = plan.add_running();
  running->set_seq_id(9);
  running->add_new_token_ids(29889);
  running->add_new_block_ids(6);
  running->set_num_new_tokens(1);
  return plan;
}

TEST(WorkerProto, StepPlanBytesAreIdenticalForEveryRank) {
  worker::v1::FrontendMessage message;
  *message.mutable_step_plan() = ExamplePlan();
  std::string first, second;
  ASSERT_TRUE(message.SerializeToString(&first));
  ASSERT_TRUE(message.SerializeToString(&second));
  EXPECT_EQ(first, second);

  worker::v1::FrontendMessage parsed;
  ASSERT_TRUE(parsed.ParseFromString(first));
  ASSERT_EQ(parsed.kind_case(), worker::v1::FrontendMessage::kStepPlan);
  const worker::v1::StepPlan& plan = parsed.step_plan();
  EXPECT_EQ(plan.step(), 7u);
  EXPECT_EQ(plan.drop_seq_ids(0), 3u);
  EXPECT_EQ(plan.new_sequences(0).token_ids_size(), 3);
  EXPECT_EQ(plan.new_sequences(0).sampling().seed(), 1234u);
  EXPECT_EQ(plan.new_sequences(0).sampling().logprobs(), -1);
  EXPECT_EQ(plan.running(0).new_block_ids(0), 6);
  // A re-serialised parse gives the same bytes again.
  std::string third;
  ASSERT_TRUE(parsed.SerializeToString(&third));
  EXPECT_EQ(first, third);
}

TEST(WorkerProto, MessagesHoldOneKind) {
  worker::v1::WorkerMessage message;
  message.mutable_hello()->set_pid(4242);
  message.mutable_hello()->set_device("cuda:1");
  EXPECT_EQ(RoundTrip(message).kind_case(), worker::v1::WorkerMessage::kHello);
  message.mutable_ready()->set_num_kv_blocks(512);
  worker::v1::WorkerMessage parsed = RoundTrip(message);
  EXPECT_EQ(parsed.kind_case(), worker::v1::WorkerMessage::kReady);
  EXPECT_FALSE(parsed.has_hello());
  EXPECT_EQ(parsed.ready().num_kv_blocks(), 512);

  worker::v1::FrontendMessage assignment;
  worker::v1::Assignment* a = assignment.mutable_assignment();
  a->set_rank(1);
  a->set_world_size(2);
  a->set_comm_backend("gloo");
  a->set_store_port(29500);
  a->mutable_kv_cache()->set_block_size(16);
  worker::v1::FrontendMessage parsed_assignment = RoundTrip(assignment);
  EXPECT_EQ(parsed_assignment.assignment().kv_cache().block_size(), 16);
  EXPECT_EQ(parsed_assignment.assignment().world_size(), 2);
}

TEST(WorkerProto, SampledTokenPresenceTellsChunkFromSample) {
  worker::v1::StepResult result;
  result.set_step(7);
  worker::v1::SequenceOutput* chunk = result.add_sequences();
  chunk->set_seq_id(11);  // a prefill chunk: nothing sampled
  worker::v1::SequenceOutput* sampled = result.add_sequences();
  sampled->set_seq_id(9);
  sampled->set_token_id(0);  // token id 0 is a real token
  worker::v1::StepResult parsed = RoundTrip(result);
  EXPECT_FALSE(parsed.sequences(0).has_token_id());
  EXPECT_TRUE(parsed.sequences(1).has_token_id());
  EXPECT_EQ(parsed.sequences(1).token_id(), 0);
  EXPECT_FALSE(parsed.sequences(1).has_logprobs());
}

TEST(WorkerProto, AttachIsBidirectional) {
  const auto* attach =
      worker::v1::WorkerMessage::descriptor()->file()->FindServiceByName("WorkerControl");
  ASSERT_NE(attach, nullptr);
  const auto* method = attach->FindMethodByName("Attach");
  ASSERT_NE(method, nullptr);
  EXPECT_TRUE(method->client_streaming());
  EXPECT_TRUE(method->server_streaming());
  EXPECT_STREQ(worker::v1::WorkerControl::service_full_name(),
               "tpserve.worker.v1.WorkerControl");
}

}  // namespace
}  // namespace tpserve

namespace tpserve {
namespace {

TEST(RequestUtf8Test, FindsTheFieldWithInvalidUtf8) {
  v1::GenerateRequest ok;
  ok.set_text("héllo");
  ok.mutable_sampling()->add_stop("fine");
  const std::string good = ok.SerializeAsString();
  EXPECT_EQ(FindInvalidUtf8Field(good, *v1::GenerateRequest::descriptor()), "");
  // Field 1 (text) with the bytes "a\xffb": what a non-checking client can send.
  EXPECT_EQ(FindInvalidUtf8Field(std::string("\x0a\x03" "a\xff" "b", 5),
                                 *v1::GenerateRequest::descriptor()),
            "text");
  // An overlong encoding of '/' and a lone surrogate are invalid too.
  EXPECT_EQ(FindInvalidUtf8Field(std::string("\x0a\x02\xc0\xaf", 4),
                                 *v1::TokenizeRequest::descriptor()),
            "text");
  EXPECT_EQ(FindInvalidUtf8Field(std::string("\x0a\x03\xed\xa0\x80", 5),
                                 *v1::TokenizeRequest::descriptor()),
            "text");
  // A stop string inside the sampling message.
  v1::GenerateRequest nested;
  nested.set_text("x");
  std::string sampling;
  {
    v1::SamplingParams p;
    p.add_stop("ZZ");
    sampling = p.SerializeAsString();
  }
  const size_t at = sampling.find("ZZ");
  ASSERT_NE(at, std::string::npos);
  sampling[at] = '\xff';
  std::string bytes = nested.SerializeAsString();
  const int field = v1::GenerateRequest::kSamplingFieldNumber;
  bytes += static_cast<char>((field << 3) | 2);
  bytes += static_cast<char>(sampling.size());
  bytes += sampling;
  EXPECT_EQ(FindInvalidUtf8Field(bytes, *v1::GenerateRequest::descriptor()), "sampling.stop");
  EXPECT_EQ(FindInvalidUtf8Field("\xff\xff", *v1::GenerateRequest::descriptor()), "");
}

}  // namespace
}  // namespace tpserve

