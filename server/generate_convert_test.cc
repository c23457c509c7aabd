#include "server/generate_convert.h"

#include "gtest/gtest.h"

namespace tpserve {
namespace {

TEST(GenerateConvertTest, UnsetFieldsTakeTheProtoDefaults) {
  v1::GenerateRequest r;
  r.mutable_token_ids()->add_ids(5);
  const EngineRequest e = ToEngineRequest(r, {5, 6, 7}, 32, 1234, absl::InfiniteFuture());
  EXPECT_EQ(e.prompt_ids, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(e.max_tokens, 29);  // the rest of the context
  EXPECT_EQ(e.sampling.temperature(), 1.0f);
  EXPECT_EQ(e.sampling.top_k(), 0);
  EXPECT_EQ(e.sampling.top_p(), 1.0f);
  EXPECT_EQ(e.sampling.repetition_penalty(), 1.0f);
  EXPECT_EQ(e.sampling.seed(), 1234u);  // drawn by the edge
  EXPECT_EQ(e.sampling.logprobs(), -1);
  EXPECT_EQ(e.sampling.prompt_logprobs(), -1);
  EXPECT_TRUE(e.skip_special_tokens);
  EXPECT_FALSE(e.ignore_eos);
}

TEST(GenerateConvertTest, SetFieldsAreCopied) {
  v1::GenerateRequest r;
  v1::SamplingParams* s = r.mutable_sampling();
  s->set_max_tokens(4);
  s->set_temperature(0);
  s->set_top_k(-1);
  s->set_top_p(0.5f);
  s->set_min_p(0.1f);
  s->set_repetition_penalty(1.2f);
  s->set_presence_penalty(-1);
  s->set_frequency_penalty(0.5f);
  s->set_seed(7);
  s->set_logprobs(0);
  s->set_prompt_logprobs(3);
  s->add_stop("\n");
  s->add_stop_token_ids(9);
  s->set_ignore_eos(true);
  r.set_skip_special_tokens(false);
  const absl::Time deadline = absl::FromUnixSeconds(100);
  const EngineRequest e = ToEngineRequest(r, {1}, 32, 1234, deadline);
  EXPECT_EQ(e.max_tokens, 4);
  EXPECT_EQ(e.sampling.temperature(), 0.0f);
  EXPECT_EQ(e.sampling.top_k(), 0);  // -1 means no limit, as 0
  EXPECT_EQ(e.sampling.top_p(), 0.5f);
  EXPECT_EQ(e.sampling.min_p(), 0.1f);
  EXPECT_EQ(e.sampling.repetition_penalty(), 1.2f);
  EXPECT_EQ(e.sampling.presence_penalty(), -1.0f);
  EXPECT_EQ(e.sampling.frequency_penalty(), 0.5f);
  EXPECT_EQ(e.sampling.seed(), 7u);
  EXPECT_EQ(e.sampling.logprobs(), 0);
  EXPECT_EQ(e.sampling.prompt_logprobs(), 3);
  EXPECT_EQ(e.stop, (std::vector<std::string>{"\n"}));
  EXPECT_EQ(e.stop_token_ids, (std::vector<int32_t>{9}));
  EXPECT_TRUE(e.ignore_eos);
  EXPECT_FALSE(e.skip_special_tokens);
  EXPECT_EQ(e.deadline, deadline);
}

EngineChunk Chunk(std::vector<int32_t> ids, std::string text) {
  EngineChunk c;
  c.token_ids = std::move(ids);
  c.text = std::move(text);
  for (int32_t id : c.token_ids) {
    c.logprobs.push_back({{id, -0.5f, "t"}, {{id, -0.5f, "t"}, {3, -1.5f, "u"}}});
  }
  return c;
}

TEST(GenerateConvertTest, AppendingEveryChunkGivesTheWholeAnswer) {
  EngineChunk first = Chunk({1, 2}, "ab");
  first.prompt_logprobs.push_back({{4, 0.0f, ""}, {}});
  EngineChunk last = Chunk({3}, "c");
  last.finish_reason = FinishReason::kEos;
  last.prompt_tokens = 1;
  last.completion_tokens = 3;

  v1::GenerateResponse stream_chunk;
  AppendChunk(first, &stream_chunk);
  EXPECT_EQ(stream_chunk.finish_reason(), v1::FINISH_REASON_UNSPECIFIED);
  EXPECT_FALSE(stream_chunk.has_usage());

  v1::GenerateResponse whole;
  AppendChunk(first, &whole);
  AppendChunk(last, &whole);
  EXPECT_EQ(whole.token_ids_size(), 3);
  EXPECT_EQ(whole.text(), "abc");
  ASSERT_EQ(whole.logprobs_size(), 3);
  EXPECT_EQ(whole.logprobs(2).token_id(), 3);
  EXPECT_EQ(whole.logprobs(2).top(1).text(), "u");
  EXPECT_FLOAT_EQ(whole.logprobs(2).top(1).logprob(), -1.5f);
  EXPECT_EQ(whole.prompt_logprobs_size(), 1);
  EXPECT_EQ(whole.finish_reason(), v1::FINISH_REASON_EOS);
  EXPECT_EQ(whole.usage().prompt_tokens(), 1);
  EXPECT_EQ(whole.usage().completion_tokens(), 3);
}

TEST(GenerateConvertTest, FinishReasons) {
  EXPECT_EQ(ToProtoFinishReason(FinishReason::kLength), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(ToProtoFinishReason(FinishReason::kStop), v1::FINISH_REASON_STOP);
  EXPECT_EQ(ToProtoFinishReason(FinishReason::kEos), v1::FINISH_REASON_EOS);
  EXPECT_EQ(ToProtoFinishReason(FinishReason::kCancelled), v1::FINISH_REASON_CANCELLED);
}

}  // namespace
}  // namespace tpserve
