// Engine tests with real tokenizers (tests/tokenizer/data): streamed text, stop strings,
// EOS, and UTF-8 safety. The fake worker plays a scripted continuation.
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/utf8.h"
#include "server/engine.h"
#include "server/testing/engine_test_util.h"
#include "server/testing/fake_step_executor.h"

namespace tpserve {
namespace {

constexpr int kPromptLen = 4;

std::unique_ptr<Tokenizer> Load(const std::string& name) {
  auto tokenizer = Tokenizer::FromPath("tests/tokenizer/data/" + name);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return tokenizer.ok() ? *std::move(tokenizer) : nullptr;
}

std::vector<int32_t> Encode(const Tokenizer& tokenizer, const std::string& text) {
  auto ids = tokenizer.Encode(text, false);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<int32_t>{};
}

// A fake whose every sequence continues its kPromptLen-token prompt with `script`
// (and then repeats its last token).
FakeExecutorConfig Scripted(std::vector<int32_t> script) {
  FakeExecutorConfig config{/*num_blocks=*/128, /*block_size=*/4};
  config.next_token = [script](absl::Span<const int32_t> history) {
    const size_t i = history.size() - kPromptLen;
    return script[std::min(i, script.size() - 1)];
  };
  return config;
}

TEST(EngineTextTest, StopStringAcrossTokensNeverLeaks) {
  auto tokenizer = Load("gpt2");
  ASSERT_NE(tokenizer, nullptr);
  const std::vector<int32_t> script = Encode(*tokenizer, " The answer is 42. Done, and more.");
  EngineOptions options = Options(6, 8);  // small batches: chunked, interleaved
  TestEngine t(Scripted(script), options, tokenizer.get());
  std::vector<EngineRequest> requests;
  for (int i = 0; i < 8; ++i) {
    requests.push_back(Request(kPromptLen, 40, i));
    requests.back().stop = {"2. D", "never appears"};
  }
  for (const auto& result : t.RunAll(requests)) {
    ASSERT_TRUE(result->status().ok()) << result->status();
    EXPECT_EQ(result->Text(), " The answer is 4");
    EXPECT_EQ(result->chunks().back().finish_reason, FinishReason::kStop);
    for (const EngineChunk& chunk : result->chunks()) {
      EXPECT_EQ(chunk.text.find('2'), std::string::npos) << chunk.text;
    }
  }
  EXPECT_TRUE(t.fake.errors().empty()) << t.fake.errors()[0];
}

TEST(EngineTextTest, EosTokenIsNotInTheText) {
  auto tokenizer = Load("gpt2");
  ASSERT_NE(tokenizer, nullptr);
  const int32_t eos = *tokenizer->TokenToId("<|endoftext|>");
  std::vector<int32_t> script = Encode(*tokenizer, " Hello there");
  script.push_back(eos);
  EngineOptions options = Options(64, 8);
  options.eos_token_ids = {eos};
  TestEngine t(Scripted(script), options, tokenizer.get());
  EngineRequest keep_special = Request(kPromptLen, 20, 1);
  keep_special.skip_special_tokens = false;
  auto results = t.RunAll({Request(kPromptLen, 20, 1), keep_special});
  for (const auto& result : results) {
    EXPECT_EQ(result->Text(), " Hello there");
    EXPECT_EQ(result->Tokens(), script);
    EXPECT_EQ(result->chunks().back().finish_reason, FinishReason::kEos);
  }
}

// A special token that is not an end of sequence, generated mid-completion: its text is
// left out by default and kept with skip_special_tokens = false, as HF's decode does.
TEST(EngineTextTest, SkipSpecialTokensDecidesWhetherSpecialTokensAreText) {
  auto tokenizer = Load("qwen2");
  ASSERT_NE(tokenizer, nullptr);
  const int32_t im_start = *tokenizer->TokenToId("<|im_start|>");
  ASSERT_TRUE(tokenizer->IsSpecialToken(im_start));
  std::vector<int32_t> script = Encode(*tokenizer, " Hello");
  script.push_back(im_start);
  for (int32_t id : Encode(*tokenizer, "user there")) script.push_back(id);
  TestEngine t(Scripted(script), Options(64, 8), tokenizer.get());
  const int n = static_cast<int>(script.size());
  EngineRequest keep_special = Request(kPromptLen, n, 1);
  keep_special.skip_special_tokens = false;
  auto results = t.RunAll({Request(kPromptLen, n, 1), keep_special});
  EXPECT_EQ(results[0]->Text(), " Hellouser there");
  EXPECT_EQ(results[0]->Text(), *tokenizer->Decode(script, /*skip_special_tokens=*/true));
  EXPECT_EQ(results[1]->Text(), " Hello<|im_start|>user there");
  EXPECT_EQ(results[1]->Text(), *tokenizer->Decode(script, /*skip_special_tokens=*/false));
  for (const auto& result : results) EXPECT_EQ(result->Tokens(), script);
}

TEST(EngineTextTest, ChunksAreWholeCharactersAndConcatenateToDecode) {
  for (const std::string name : {"gpt2", "mistral", "qwen2"}) {
    auto tokenizer = Load(name);
    ASSERT_NE(tokenizer, nullptr);
    const std::vector<int32_t> script =
        Encode(*tokenizer, "héllo 😀 wörld 日本語 — naïve café");
    TestEngine t(Scripted(script), Options(64, 8), tokenizer.get());
    EngineRequest request = Request(kPromptLen, static_cast<int>(script.size()), 1);
    request.stop = {"ïve c"};
    auto results = t.RunAll({request, Request(kPromptLen, static_cast<int>(script.size()), 2)});
    EXPECT_EQ(results[0]->Text(), "héllo 😀 wörld 日本語 — na") << name;
    EXPECT_EQ(results[1]->Text(), *tokenizer->Decode(script, true)) << name;
    for (const auto& result : results) {
      for (const EngineChunk& chunk : result->chunks()) {
        EXPECT_TRUE(ValidateUtf8(chunk.text).ok()) << name << ": " << chunk.text;
      }
    }
  }
}

TEST(EngineTextTest, LogprobsCarryEachTokensText) {
  auto tokenizer = Load("gpt2");
  ASSERT_NE(tokenizer, nullptr);
  const std::vector<int32_t> script = Encode(*tokenizer, " one two");
  TestEngine t(Scripted(script), Options(64, 8), tokenizer.get());
  EngineRequest request = Request(kPromptLen, 2, 1);
  request.sampling.set_logprobs(0);
  auto results = t.RunAll({request});
  std::vector<std::string> texts;
  for (const EngineChunk& chunk : results[0]->chunks()) {
    for (const PositionLogprobs& lp : chunk.logprobs) texts.push_back(lp.chosen.text);
  }
  EXPECT_EQ(texts, (std::vector<std::string>{" one", " two"}));
}

}  // namespace
}  // namespace tpserve
