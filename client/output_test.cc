#include "client/output.h"

#include "gtest/gtest.h"

namespace tpserve {
namespace {

v1::GenerateResponse Chunk(std::vector<int32_t> ids, std::string text) {
  v1::GenerateResponse c;
  c.mutable_token_ids()->Add(ids.begin(), ids.end());
  c.set_text(text);
  for (int32_t id : ids) {
    v1::TokenLogprob* lp = c.add_logprobs();
    lp->set_token_id(id);
    lp->set_logprob(-0.25f);
    v1::TopLogprob* top = lp->add_top();
    top->set_token_id(id);
    top->set_logprob(-0.25f);
    top->set_text("t");
  }
  return c;
}

TEST(OutputTest, StreamedChunksJoinIntoOneJsonObject) {
  v1::GenerateResponse whole;
  AppendGenerateChunk(Chunk({1, 2}, "he"), &whole);
  v1::GenerateResponse last = Chunk({3}, "llo");
  last.set_finish_reason(v1::FINISH_REASON_EOS);
  last.mutable_usage()->set_prompt_tokens(4);
  last.mutable_usage()->set_completion_tokens(3);
  last.mutable_usage()->set_cached_prompt_tokens(2);
  AppendGenerateChunk(last, &whole);
  const nlohmann::json j = GenerateJson(whole);
  EXPECT_EQ(j["token_ids"], nlohmann::json::parse("[1,2,3]"));
  EXPECT_EQ(j["text"], "hello");
  EXPECT_EQ(j["finish_reason"], "eos");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 4);
  EXPECT_EQ(j["usage"]["completion_tokens"], 3);
  EXPECT_EQ(j["usage"]["cached_prompt_tokens"], 2);
  ASSERT_EQ(j["logprobs"].size(), 3u);
  EXPECT_EQ(j["logprobs"][2]["token_id"], 3);
  EXPECT_DOUBLE_EQ(j["logprobs"][2]["logprob"].get<double>(), -0.25);
  EXPECT_EQ(j["logprobs"][2]["top"][0]["text"], "t");
  EXPECT_FALSE(j.contains("prompt_logprobs"));
  EXPECT_EQ(GenerateTrailer(whole),
            "token_ids: 1 2 3\nfinish_reason: eos  prompt_tokens: 4  completion_tokens: 3  "
            "cached_prompt_tokens: 2\n");
}

TEST(OutputTest, Errors) {
  const grpc::Status status(grpc::INVALID_ARGUMENT, "sampling.top_p must be in (0, 1], got 2");
  EXPECT_EQ(ErrorJson(status).dump(),
            R"({"error":{"code":"INVALID_ARGUMENT","message":"sampling.top_p must be in (0, 1], got 2"}})");
  EXPECT_EQ(ErrorLine(status), "error: INVALID_ARGUMENT: sampling.top_p must be in (0, 1], got 2");
  EXPECT_EQ(StatusCodeName(grpc::UNAVAILABLE), "UNAVAILABLE");
  EXPECT_EQ(StatusCodeName(grpc::UNAUTHENTICATED), "UNAUTHENTICATED");
  EXPECT_EQ(StatusCodeName(static_cast<grpc::StatusCode>(99)), "CODE_99");
}

TEST(OutputTest, FinishReasonNames) {
  EXPECT_EQ(FinishReasonName(v1::FINISH_REASON_UNSPECIFIED), "");
  EXPECT_EQ(FinishReasonName(v1::FINISH_REASON_LENGTH), "length");
  EXPECT_EQ(FinishReasonName(v1::FINISH_REASON_STOP), "stop");
  EXPECT_EQ(FinishReasonName(v1::FINISH_REASON_CANCELLED), "cancelled");
}

}  // namespace
}  // namespace tpserve
