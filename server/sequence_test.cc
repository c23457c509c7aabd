#include "server/sequence.h"

#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace tpserve {
namespace {

constexpr char kGpt2[] = "tests/tokenizer/data/gpt2";
constexpr int32_t kGpt2Eos = 50256;  // <|endoftext|>

class SequenceTest : public testing::Test {
 protected:
  void SetUp() override {
    auto tokenizer = Tokenizer::FromPath(kGpt2);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = *std::move(tokenizer);
  }

  std::vector<int32_t> Encode(const std::string& text) {
    auto ids = tokenizer_->Encode(text, false);
    EXPECT_TRUE(ids.ok()) << ids.status();
    return ids.ok() ? *ids : std::vector<int32_t>{};
  }

  // Feeds ids until one ends the sequence; returns the concatenated chunks.
  EngineChunk Feed(Sequence& seq, const std::vector<int32_t>& ids) {
    EngineChunk all;
    for (int32_t id : ids) {
      auto finish = seq.AppendToken(id, worker::v1::PositionLogprobs());
      EXPECT_TRUE(finish.ok()) << finish.status();
      if (finish.ok() && finish->has_value()) {
        EXPECT_TRUE(seq.Finish(**finish).ok());
      }
      EngineChunk chunk = seq.TakeChunk();
      all.token_ids.insert(all.token_ids.end(), chunk.token_ids.begin(), chunk.token_ids.end());
      all.text += chunk.text;
      all.finish_reason = chunk.finish_reason;
      all.completion_tokens = chunk.completion_tokens;
      if (seq.finish_reason().has_value()) break;
    }
    return all;
  }

  EngineRequest Request(int max_tokens) {
    EngineRequest request;
    request.prompt_ids = {1, 2, 3};
    request.max_tokens = max_tokens;
    return request;
  }

  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(SequenceTest, TokenAccounting) {
  Sequence seq(7, Request(4), nullptr, {});
  ASSERT_TRUE(seq.AppendToken(9, {}).ok());
  EXPECT_EQ(seq.num_prompt_tokens(), 3);
  EXPECT_EQ(seq.num_tokens(), 4);
  EXPECT_EQ(seq.TokenRange(2, 4), (std::vector<int32_t>{3, 9}));
  seq.set_num_computed_tokens(3);
  EXPECT_EQ(seq.num_uncomputed_tokens(), 1);
  seq.MarkSent(true);
  EXPECT_EQ(seq.num_tokens_sent(), 4);
}

TEST_F(SequenceTest, MaxTokensEndsWithLength) {
  Sequence seq(1, Request(3), tokenizer_.get(), {kGpt2Eos});
  EngineChunk out = Feed(seq, Encode(" one two three four"));
  EXPECT_EQ(out.finish_reason, FinishReason::kLength);
  EXPECT_EQ(out.completion_tokens, 3);
  EXPECT_EQ(out.text, " one two three");
}

TEST_F(SequenceTest, EosIsCountedButNotInTheText) {
  Sequence seq(1, Request(10), tokenizer_.get(), {kGpt2Eos});
  std::vector<int32_t> ids = Encode(" hi");
  ids.push_back(kGpt2Eos);
  ids.push_back(Encode(" after")[0]);
  EngineChunk out = Feed(seq, ids);
  EXPECT_EQ(out.finish_reason, FinishReason::kEos);
  EXPECT_EQ(out.text, " hi");
  EXPECT_EQ(out.token_ids.back(), kGpt2Eos);
  EXPECT_EQ(out.completion_tokens, 2);
}

TEST_F(SequenceTest, IgnoreEosKeepsGoing) {
  EngineRequest request = Request(3);
  request.ignore_eos = true;
  Sequence seq(1, request, tokenizer_.get(), {kGpt2Eos});
  EngineChunk out = Feed(seq, {Encode(" a")[0], kGpt2Eos, Encode(" b")[0]});
  EXPECT_EQ(out.finish_reason, FinishReason::kLength);
  EXPECT_EQ(out.text, " a b");  // the special token is skipped in the text
}

TEST_F(SequenceTest, StopTokenIdEndsWithStop) {
  const std::vector<int32_t> ids = Encode(" x y z");
  EngineRequest request = Request(10);
  request.stop_token_ids = {ids[1]};
  Sequence seq(1, request, tokenizer_.get(), {kGpt2Eos});
  EngineChunk out = Feed(seq, ids);
  EXPECT_EQ(out.finish_reason, FinishReason::kStop);
  EXPECT_EQ(out.text, " x");
  EXPECT_EQ(out.token_ids, (std::vector<int32_t>{ids[0], ids[1]}));
}

TEST_F(SequenceTest, StopStringAcrossTokensNeverLeaks) {
  const std::vector<int32_t> ids = Encode(" the end of the story is here");
  EngineRequest request = Request(50);
  request.stop = {"d of t"};
  Sequence seq(1, request, tokenizer_.get(), {kGpt2Eos});
  std::string streamed;
  for (int32_t id : ids) {
    auto finish = seq.AppendToken(id, {});
    ASSERT_TRUE(finish.ok());
    if (finish->has_value()) {
      ASSERT_TRUE(seq.Finish(**finish).ok());
    }
    streamed += seq.TakeChunk().text;
    EXPECT_EQ(streamed.find("d of"), std::string::npos) << streamed;
    if (seq.finish_reason().has_value()) break;
  }
  EXPECT_EQ(seq.finish_reason(), FinishReason::kStop);
  EXPECT_EQ(streamed, " the en");
}

TEST_F(SequenceTest, HeldBackTextIsReleasedAtLength) {
  EngineRequest request = Request(2);
  request.stop = {" wor!"};
  Sequence seq(1, request, tokenizer_.get(), {kGpt2Eos});
  EngineChunk out = Feed(seq, Encode(" hello world"));
  EXPECT_EQ(out.finish_reason, FinishReason::kLength);
  EXPECT_EQ(out.text, " hello world");
}

TEST_F(SequenceTest, NoTokenizerMeansNoText) {
  Sequence seq(1, Request(2), nullptr, {});
  EngineChunk out = Feed(seq, {5, 6, 7});
  EXPECT_EQ(out.token_ids, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(out.text, "");
}

TEST_F(SequenceTest, LogprobsCarryTokenText) {
  EngineRequest request = Request(5);
  request.sampling.set_logprobs(1);
  const int32_t hi = Encode(" hi")[0];
  Sequence seq(1, request, tokenizer_.get(), {});
  worker::v1::PositionLogprobs lp;
  lp.mutable_chosen()->set_token_id(hi);
  lp.mutable_chosen()->set_logprob(-0.25f);
  lp.add_top()->set_token_id(hi);
  ASSERT_TRUE(seq.AppendToken(hi, lp).ok());
  EngineChunk chunk = seq.TakeChunk();
  ASSERT_EQ(chunk.logprobs.size(), 1u);
  EXPECT_EQ(chunk.logprobs[0].chosen.text, " hi");
  EXPECT_FLOAT_EQ(chunk.logprobs[0].chosen.logprob, -0.25f);
  ASSERT_EQ(chunk.logprobs[0].top.size(), 1u);
  EXPECT_EQ(chunk.logprobs[0].top[0].text, " hi");
}

TEST_F(SequenceTest, PromptLogprobsAreKeptOnceInOrder) {
  EngineRequest request = Request(5);
  request.sampling.set_prompt_logprobs(0);
  Sequence seq(1, request, nullptr, {});
  google::protobuf::RepeatedPtrField<worker::v1::PositionLogprobs> lps;
  for (int i = 0; i < 3; ++i) lps.Add()->mutable_chosen()->set_token_id(100 + i);
  google::protobuf::RepeatedPtrField<worker::v1::PositionLogprobs> first_only;
  *first_only.Add() = lps[0];
  seq.AddPromptLogprobs(0, first_only);
  seq.AddPromptLogprobs(0, lps);  // a recompute repeats position 0; position 2 is past the prompt
  ASSERT_TRUE(seq.AppendToken(4, {}).ok());
  EngineChunk first = seq.TakeChunk();
  // Prompt [1, 2, 3]: entry 0 is token 1 (no context); rows 0 and 1 score tokens 2 and 3.
  ASSERT_EQ(first.prompt_logprobs.size(), 3u);
  EXPECT_EQ(first.prompt_logprobs[0].chosen.token_id, request.prompt_ids[0]);
  EXPECT_EQ(first.prompt_logprobs[0].chosen.logprob, 0.0f);
  EXPECT_TRUE(first.prompt_logprobs[0].top.empty());
  EXPECT_EQ(first.prompt_logprobs[1].chosen.token_id, 100);
  EXPECT_EQ(first.prompt_logprobs[2].chosen.token_id, 101);
  ASSERT_TRUE(seq.AppendToken(5, {}).ok());
  EXPECT_TRUE(seq.TakeChunk().prompt_logprobs.empty());
}

TEST(SequenceTokensTest, StartsWithSpansPromptAndOutput) {
  EngineRequest request;
  request.prompt_ids = {1, 2, 3};
  request.max_tokens = 5;
  request.ignore_eos = true;
  Sequence seq(1, request, nullptr, {});
  ASSERT_TRUE(seq.AppendToken(7, worker::v1::PositionLogprobs()).ok());
  ASSERT_TRUE(seq.AppendToken(8, worker::v1::PositionLogprobs()).ok());
  for (const std::vector<int32_t>& yes :
       std::vector<std::vector<int32_t>>{{}, {1, 2}, {1, 2, 3}, {1, 2, 3, 7}, {1, 2, 3, 7, 8}}) {
    EXPECT_TRUE(seq.StartsWith(yes)) << yes.size();
  }
  for (const std::vector<int32_t>& no :
       std::vector<std::vector<int32_t>>{{2}, {1, 2, 4}, {1, 2, 3, 8}, {1, 2, 3, 7, 8, 9}}) {
    EXPECT_FALSE(seq.StartsWith(no)) << no.size();
  }
}

}  // namespace
}  // namespace tpserve
