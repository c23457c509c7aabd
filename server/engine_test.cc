// Engine tests over FakeStepExecutor (no tokenizer: token ids only). The fake samples
// a hash of each sequence's history, so every request's tokens are known in advance
// whatever the batching, chunking or preemption.
#include "server/engine.h"

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "server/testing/engine_test_util.h"
#include "server/testing/fake_step_executor.h"

namespace tpserve {
namespace {

constexpr int kVocab = 1000;

std::vector<int32_t> SoloOutput(std::vector<int32_t> prompt, int max_tokens) {
  return FakeStepExecutor::HashContinuation(std::move(prompt), max_tokens, kVocab);
}

void ExpectSoloOutputs(const std::vector<EngineRequest>& requests,
                       const std::vector<std::unique_ptr<Collector>>& results) {
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_TRUE(results[i]->status().ok()) << results[i]->status();
    EXPECT_EQ(results[i]->Tokens(), SoloOutput(requests[i].prompt_ids, requests[i].max_tokens))
        << "request " << i;
    EXPECT_EQ(results[i]->done_calls(), 1);
  }
}

// Waits (30 s at most) until `result` has streamed `n` chunks.
void WaitForChunks(const Collector& result, size_t n) {
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (result.chunks().size() < n && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(2));
  }
}

std::vector<EngineRequest> MixedRequests(int n) {
  std::vector<EngineRequest> requests;
  for (int i = 0; i < n; ++i) requests.push_back(Request(1 + (i * 7) % 40, 1 + (i * 5) % 30, i));
  return requests;
}

TEST(EngineTest, ConcurrentRequestsMatchRequestsAlone) {
  const std::vector<EngineRequest> requests = MixedRequests(32);
  FakeExecutorConfig fake_config{/*num_blocks=*/48, /*block_size=*/4, kVocab};
  std::vector<std::unique_ptr<Collector>> alone;
  {
    TestEngine solo(fake_config, Options(32, 16));
    for (const EngineRequest& request : requests) {
      auto one = solo.RunAll({request});
      alone.push_back(std::move(one[0]));
    }
  }
  ExpectSoloOutputs(requests, alone);
  TestEngine batched(fake_config, Options(32, 16));
  auto together = batched.RunAll(requests);
  ExpectSoloOutputs(requests, together);
  EXPECT_TRUE(batched.fake.errors().empty()) << batched.fake.errors()[0];
  EXPECT_GT(batched.fake.num_partial_prefills(), 0);
  EXPECT_EQ(batched.engine->stats().kv_blocks_in_use, 0);
}

TEST(EngineTest, PreemptionUnderATinyKvPool) {
  std::vector<EngineRequest> requests;
  for (int i = 0; i < 16; ++i) requests.push_back(Request(8, 16, i));
  TestEngine t(FakeExecutorConfig{/*num_blocks=*/12, /*block_size=*/4, kVocab}, Options(64, 16));
  auto results = t.RunAll(requests);
  ExpectSoloOutputs(requests, results);
  EXPECT_TRUE(t.fake.errors().empty()) << t.fake.errors()[0];
  EXPECT_GT(t.fake.num_recomputes(), 0);
  EXPECT_GE(t.engine->stats().preemptions, static_cast<uint64_t>(t.fake.num_recomputes()));
  EXPECT_EQ(t.engine->stats().kv_blocks_in_use, 0);
}

TEST(EngineTest, LongPromptIsChunkedAndDecodesContinue) {
  std::vector<EngineRequest> requests = {Request(4, 30, 1), Request(4, 30, 2),
                                         Request(100, 5, 3)};
  TestEngine t(FakeExecutorConfig{/*num_blocks=*/64, /*block_size=*/4, kVocab}, Options(8, 8));
  auto results = t.RunAll(requests);
  ExpectSoloOutputs(requests, results);
  EXPECT_TRUE(t.fake.errors().empty()) << t.fake.errors()[0];
  EXPECT_GE(t.fake.num_partial_prefills(), 100 / 8);
}

// --step-time-target-ms beside running decodes: a fake host whose step of n tokens takes
// 40 ms + 2 ms·n, a 160 ms target. Twelve decoders run alone first (64 ms steps), then a
// 600-token prompt arrives: its chunks are sized from the model F + c·n that the
// decoders' prompt step and their decode steps gave, (160 - 40) / 2 = 60 tokens a step
// with the 12 decodes in it, from the first chunk on. (Whole-step time per token, the
// former estimate, read 64 ms / 12 = 5.3 ms "a token" off the decode steps and started the
// prompt at 30-token steps.)
TEST(EngineTest, StepTimeTargetSizesChunksFromTheStepCostModel) {
  FakeExecutorConfig config{/*num_blocks=*/400, /*block_size=*/4, kVocab};
  config.step_delay = absl::Milliseconds(40);
  config.token_delay = absl::Milliseconds(2);
  EngineOptions options = Options(1024, 16);
  options.step_time_target = absl::Milliseconds(160);
  TestEngine t(config, options, /*tokenizer=*/nullptr, /*start=*/false);
  std::vector<EngineRequest> decoders;
  for (int i = 0; i < 12; ++i) decoders.push_back(Request(4, 60, i));
  // All twelve queued before the first step (a busy host once let it start with three).
  std::vector<std::unique_ptr<Collector>> results = t.SubmitAll(decoders);
  t.engine->Start();
  WaitForChunks(*results[0], 6);
  const EngineRequest long_prompt = Request(600, 2, 99);
  Collector long_result;
  ASSERT_TRUE(t.engine->Submit(long_prompt, long_result.OnChunk(), long_result.OnDone()).ok());
  ASSERT_TRUE(long_result.WaitDone());
  EXPECT_TRUE(long_result.status().ok()) << long_result.status();
  for (auto& r : results) ASSERT_TRUE(r->WaitDone());
  ExpectSoloOutputs(decoders, results);
  EXPECT_TRUE(t.fake.errors().empty()) << t.fake.errors()[0];

  const std::vector<int64_t> steps = t.fake.step_tokens();
  ASSERT_EQ(steps[0], 48);  // the decoders' prompts (the initial budget is 64)
  size_t i = 1;
  while (i < steps.size() && steps[i] == 12) ++i;
  ASSERT_GE(i, 5u) << "decode-only steps before the long prompt";
  std::vector<int64_t> chunk_steps;  // steps with the long prompt's chunks beside 12 decodes
  for (; i < steps.size() && steps[i] > 13; ++i) chunk_steps.push_back(steps[i]);
  ASSERT_GE(chunk_steps.size(), 10u);  // 600 tokens at 48 a step
  for (size_t j = 0; j + 1 < chunk_steps.size(); ++j) {
    // 60 when sleeps are exact; a late wake-up counts into F and shrinks it a little.
    EXPECT_GE(chunk_steps[j], 45) << "step " << j << " of the prompt";
    EXPECT_LE(chunk_steps[j], 62) << "step " << j << " of the prompt";
  }
}

// Staggered admission wired to the measured step cost: on a fake host whose step of n
// tokens takes 20 ms + 4 ms·n, a burst of eight 64-token prompts arriving while another
// request decodes is prefilled one prompt a step (the group, sqrt(Q·F'/c), stays under
// two prompts even if late wake-ups tripled F), each step at most one prompt beside the
// decodes; with staggered_admission off, the burst's prompts share a step.
TEST(EngineTest, StaggeredAdmissionPrefillsABurstInGroupsFromTheStepCostModel) {
  for (const bool staggered : {true, false}) {
    SCOPED_TRACE(staggered ? "staggered" : "whole");
    FakeExecutorConfig config{/*num_blocks=*/400, /*block_size=*/4, kVocab};
    config.step_delay = absl::Milliseconds(20);
    config.token_delay = absl::Milliseconds(4);
    EngineOptions options = Options(1024, 16);
    options.staggered_admission = staggered;
    TestEngine t(config, options);
    std::vector<std::unique_ptr<Collector>> first = t.SubmitAll({Request(64, 40, 100)});
    WaitForChunks(*first[0], 4);
    std::vector<EngineRequest> burst;
    for (int i = 0; i < 8; ++i) burst.push_back(Request(64, 4, i));
    std::vector<std::unique_ptr<Collector>> results = t.RunAll(burst);
    ASSERT_TRUE(first[0]->WaitDone());
    ExpectSoloOutputs(burst, results);
    EXPECT_TRUE(t.fake.errors().empty()) << t.fake.errors()[0];

    const std::vector<int64_t> steps = t.fake.step_tokens();
    ASSERT_EQ(steps[0], 64);  // the first request's prompt
    std::vector<int64_t> prompt_steps;  // later steps that prefill (decodes: at most 9)
    for (size_t i = 1; i < steps.size(); ++i) {
      if (steps[i] > 9) prompt_steps.push_back(steps[i]);
    }
    if (staggered) {
      ASSERT_EQ(prompt_steps.size(), 8u);
      for (int64_t n : prompt_steps) EXPECT_LE(n, 64 + 9);
    } else {
      ASSERT_FALSE(prompt_steps.empty());
      EXPECT_GE(*std::max_element(prompt_steps.begin(), prompt_steps.end()), 2 * 64);
    }
  }
}

// WarmUp: a prompt prefilled alone, then another prefilled and decoded two steps; both
// end, their blocks leave the cache, and the engine then serves as before.
TEST(EngineTest, WarmUpRunsTwoPromptsAndLeavesNothingBehind) {
  TestEngine t(FakeExecutorConfig{/*num_blocks=*/64, /*block_size=*/4, kVocab}, Options(256, 16));
  absl::StatusOr<WarmupTimes> warm = t.engine->WarmUp(40, absl::Now() + absl::Seconds(30));
  ASSERT_TRUE(warm.ok()) << warm.status();
  EXPECT_EQ(warm->prompt_tokens, 40);
  EXPECT_EQ(t.fake.step_tokens(), (std::vector<int64_t>{40, 40, 1, 1}));
  EXPECT_TRUE(t.fake.errors().empty()) << t.fake.errors()[0];
  const EngineStats stats = t.engine->stats();
  EXPECT_EQ(stats.kv_blocks_in_use, 0);
  EXPECT_EQ(stats.kv_blocks_cached, 0);
  EXPECT_EQ(stats.steps, 4u);
  const std::vector<EngineRequest> requests = MixedRequests(8);
  ExpectSoloOutputs(requests, t.RunAll(requests));

  // A prompt is cut to what half the cache (and max_context) holds, less the decodes;
  // none fits: nothing runs.
  TestEngine small(FakeExecutorConfig{/*num_blocks=*/8, /*block_size=*/4, kVocab},
                   Options(256, 16));
  warm = small.engine->WarmUp(64, absl::Now() + absl::Seconds(30));
  ASSERT_TRUE(warm.ok()) << warm.status();
  EXPECT_EQ(warm->prompt_tokens, 16 - 3);
  TestEngine tiny(FakeExecutorConfig{/*num_blocks=*/2, /*block_size=*/2, kVocab},
                  Options(256, 16));
  warm = tiny.engine->WarmUp(64, absl::Now() + absl::Seconds(30));
  ASSERT_TRUE(warm.ok()) << warm.status();
  EXPECT_EQ(warm->prompt_tokens, 0);
  EXPECT_TRUE(tiny.fake.step_tokens().empty());
}

// A warm-up that cannot run (the engine never started) ends by its deadline, not never.
TEST(EngineTest, WarmUpOfAnEngineNotStartedEndsAtItsDeadline) {
  TestEngine t(FakeExecutorConfig{/*num_blocks=*/64, /*block_size=*/4, kVocab}, Options(256, 16),
               /*tokenizer=*/nullptr, /*start=*/false);
  const absl::Time start = absl::Now();
  absl::StatusOr<WarmupTimes> warm = t.engine->WarmUp(16, start + absl::Milliseconds(100));
  EXPECT_EQ(warm.status().code(), absl::StatusCode::kDeadlineExceeded) << warm.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

// WarmUp starts the step cost model from its second round, not the cold first: on a
// fake host whose step of n tokens takes 40 ms + 2 ms·n and whose first step 400 ms
// more, a 160 ms target gives the first real prompt (600 tokens) 60-token chunks from
// its first step. Counting the cold step would have made a token cost 8 ms (15-token
// chunks); without a warm-up the prompt starts at 64 tokens a step and is re-sized
// from its own steps.
TEST(EngineTest, WarmUpStartsTheStepCostModelFromWarmSteps) {
  FakeExecutorConfig config{/*num_blocks=*/400, /*block_size=*/4, kVocab};
  config.step_delay = absl::Milliseconds(40);
  config.token_delay = absl::Milliseconds(2);
  config.first_step_delay = absl::Milliseconds(400);
  EngineOptions options = Options(1024, 16);
  options.step_time_target = absl::Milliseconds(160);
  TestEngine t(config, options);
  absl::StatusOr<WarmupTimes> warm = t.engine->WarmUp(64, absl::Now() + absl::Seconds(30));
  ASSERT_TRUE(warm.ok()) << warm.status();
  EXPECT_GE(warm->cold_prefill, absl::Milliseconds(400));
  EXPECT_LT(warm->prefill, absl::Milliseconds(400));
  EXPECT_GE(warm->decode, absl::Milliseconds(40));
  const EngineRequest prompt = Request(600, 1, 7);
  auto results = t.RunAll({prompt});
  ExpectSoloOutputs({prompt}, results);
  const std::vector<int64_t> steps = t.fake.step_tokens();
  ASSERT_GE(steps.size(), 4u + 10u) << "600 tokens at 60 a step";
  ASSERT_LE(steps.size(), 4u + 14u) << "600 tokens at 60 a step";
  for (size_t i = 4; i + 1 < steps.size(); ++i) {
    // 60 when sleeps are exact; a late wake-up counts into F and shrinks it a little.
    EXPECT_GE(steps[i], 45) << "step " << i;
    EXPECT_LE(steps[i], 62) << "step " << i;
  }
}

// After WarmUp the first burst of prompts is already admitted in groups (the step cost
// is measured); a cold engine admits it whole (as many as the token budget allows).
TEST(EngineTest, WarmUpLetsTheFirstBurstBeStaggered) {
  for (const bool warm : {true, false}) {
    SCOPED_TRACE(warm ? "warmed up" : "cold");
    FakeExecutorConfig config{/*num_blocks=*/400, /*block_size=*/4, kVocab};
    config.step_delay = absl::Milliseconds(20);
    config.token_delay = absl::Milliseconds(4);
    TestEngine t(config, Options(1024, 16), /*tokenizer=*/nullptr, /*start=*/false);
    size_t warmup_steps = 0;
    if (warm) {
      t.engine->Start();
      ASSERT_TRUE(t.engine->WarmUp(64, absl::Now() + absl::Seconds(30)).ok());
      warmup_steps = t.fake.step_tokens().size();
    }
    std::vector<EngineRequest> burst;
    for (int i = 0; i < 8; ++i) burst.push_back(Request(64, 2, i));
    std::vector<std::unique_ptr<Collector>> results = t.SubmitAll(burst);
    if (!warm) t.engine->Start();  // the whole burst queued before the first step
    for (auto& r : results) ASSERT_TRUE(r->WaitDone());
    ExpectSoloOutputs(burst, results);
    const std::vector<int64_t> steps = t.fake.step_tokens();
    ASSERT_GT(steps.size(), warmup_steps);
    if (warm) {
      EXPECT_LE(steps[warmup_steps], 64 * 2) << "the burst's first step";
    } else {
      EXPECT_EQ(steps[0], 8 * 64);
    }
  }
}

TEST(EngineTest, LastChunkCarriesLengthAndUsage) {
  TestEngine t(FakeExecutorConfig{}, Options(64, 8));
  auto results = t.RunAll({Request(5, 4, 1)});
  const std::vector<EngineChunk> chunks = results[0]->chunks();
  ASSERT_EQ(chunks.size(), 4u);
  for (size_t i = 0; i + 1 < chunks.size(); ++i) EXPECT_FALSE(chunks[i].finish_reason);
  EXPECT_EQ(chunks.back().finish_reason, FinishReason::kLength);
  EXPECT_EQ(chunks.back().prompt_tokens, 5);
  EXPECT_EQ(chunks.back().completion_tokens, 4);
}

// Generates 10, 11, 12, then kEos, then 20, 21, ... after any prompt of kPromptLen.
constexpr int kPromptLen = 3;
constexpr int32_t kEos = 999;
int32_t ScriptedToken(absl::Span<const int32_t> history) {
  const int i = static_cast<int>(history.size()) - kPromptLen;
  return i < 3 ? 10 + i : (i == 3 ? kEos : 20 + i);
}

TEST(EngineTest, EosEndsUnlessIgnored) {
  FakeExecutorConfig fake_config;
  fake_config.next_token = ScriptedToken;
  EngineOptions options = Options(64, 8);
  options.eos_token_ids = {kEos};
  TestEngine t(fake_config, options);
  EngineRequest plain = Request(kPromptLen, 8, 1);
  EngineRequest ignoring = plain;
  ignoring.ignore_eos = true;
  EngineRequest stop_id = plain;
  stop_id.stop_token_ids = {11};
  auto results = t.RunAll({plain, ignoring, stop_id});
  EXPECT_EQ(results[0]->Tokens(), (std::vector<int32_t>{10, 11, 12, kEos}));
  EXPECT_EQ(results[0]->chunks().back().finish_reason, FinishReason::kEos);
  EXPECT_EQ(results[0]->chunks().back().completion_tokens, 4);
  EXPECT_EQ(results[1]->Tokens().size(), 8u);
  EXPECT_EQ(results[1]->chunks().back().finish_reason, FinishReason::kLength);
  EXPECT_EQ(results[2]->Tokens(), (std::vector<int32_t>{10, 11}));
  EXPECT_EQ(results[2]->chunks().back().finish_reason, FinishReason::kStop);
}

TEST(EngineTest, LogprobsPerTokenAndPromptLogprobsOnce) {
  FakeExecutorConfig fake_config{/*num_blocks=*/64, /*block_size=*/4, kVocab};
  TestEngine t(fake_config, Options(8, 8));
  EngineRequest request = Request(20, 6, 1);
  request.sampling.set_logprobs(2);
  request.sampling.set_prompt_logprobs(0);
  auto results = t.RunAll({request});
  const std::vector<EngineChunk> chunks = results[0]->chunks();
  ASSERT_FALSE(chunks.empty());
  // One per prompt token; the first has no context: logprob 0, no alternatives.
  ASSERT_EQ(chunks[0].prompt_logprobs.size(), 20u);
  EXPECT_EQ(chunks[0].prompt_logprobs[0].chosen.logprob, 0.0f);
  EXPECT_TRUE(chunks[0].prompt_logprobs[0].top.empty());
  for (size_t i = 0; i < 20; ++i) {
    EXPECT_EQ(chunks[0].prompt_logprobs[i].chosen.token_id, request.prompt_ids[i]);
  }
  for (const EngineChunk& chunk : chunks) {
    ASSERT_EQ(chunk.logprobs.size(), chunk.token_ids.size());
    for (size_t i = 0; i < chunk.token_ids.size(); ++i) {
      EXPECT_EQ(chunk.logprobs[i].chosen.token_id, chunk.token_ids[i]);
      EXPECT_EQ(chunk.logprobs[i].top.size(), 2u);
    }
    if (&chunk != &chunks[0]) {
      EXPECT_TRUE(chunk.prompt_logprobs.empty());
    }
  }
}

}  // namespace
}  // namespace tpserve
