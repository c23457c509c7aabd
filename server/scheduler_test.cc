#include "server/scheduler.h"

#include <cstdio>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "server/testing/fake_step_executor.h"
#include "tpserve/v1/batch_limits.h"

namespace tpserve {
namespace {

constexpr int kVocab = 1000;

// What the fake model generates for `prompt` alone.
std::vector<int32_t> SoloOutput(std::vector<int32_t> prompt, int max_tokens) {
  return FakeStepExecutor::HashContinuation(std::move(prompt), max_tokens, kVocab);
}

// Scheduler + block manager + fake workers, driven step by step as the engine would.
class Harness {
 public:
  // `limits`: {max_batch_tokens, max_sequences}.
  Harness(int num_blocks, int block_size, int watermark, std::pair<int, int> limits,
          bool prefix_caching = false)
      : blocks_(*BlockManager::Create({num_blocks, block_size, watermark, prefix_caching})),
        scheduler_(MakeBatchLimits(0, limits.first, limits.second), &blocks_),
        fake_(FakeExecutorConfig{num_blocks, block_size, kVocab,
                                 MakeBatchLimits(0, limits.first, limits.second)}) {}

  Sequence* Add(std::vector<int32_t> prompt, int max_tokens, int prompt_logprobs = -1) {
    EngineRequest request;
    request.prompt_ids = std::move(prompt);
    request.max_tokens = max_tokens;
    request.sampling.set_prompt_logprobs(prompt_logprobs);
    seqs_.push_back(std::make_unique<Sequence>(seqs_.size() + 1, request, nullptr,
                                               std::vector<int32_t>{}));
    scheduler_.Add(seqs_.back().get());
    return seqs_.back().get();
  }

  // Runs one step; returns its plan (empty step number 0 when nothing ran).
  worker::v1::StepPlan Step() {
    ScheduledStep step = scheduler_.Schedule();
    if (step.batch.empty()) return {};
    auto result = fake_.RunStep(step.plan);
    EXPECT_TRUE(result.ok()) << result.status();
    if (!result.ok()) return {};
    scheduler_.CompleteStep(step);
    for (const auto& output : result->sequences()) {
      if (!output.has_token_id()) continue;
      Sequence* seq = seqs_[output.seq_id() - 1].get();
      auto finish = seq->AppendToken(output.token_id(), output.logprobs());
      EXPECT_TRUE(finish.ok());
      if (finish.ok() && finish->has_value()) {
        EXPECT_TRUE(seq->Finish(**finish).ok());
        scheduler_.Remove(seq);
      }
    }
    return step.plan;
  }

  void RunToEnd(int max_steps = 10000) {
    for (int i = 0; i < max_steps && scheduler_.HasWork(); ++i) {
      if (Step().step() == 0) break;
    }
    EXPECT_FALSE(scheduler_.HasWork());
    EXPECT_EQ(blocks_.num_used_blocks(), 0);
  }

  void ExpectSoloOutputs() {
    for (const auto& seq : seqs_) {
      EXPECT_EQ(seq->output_ids(),
                SoloOutput(seq->request().prompt_ids, seq->request().max_tokens))
          << "seq " << seq->id();
    }
    EXPECT_TRUE(fake_.errors().empty()) << fake_.errors()[0];
  }

  BlockManager blocks_;
  Scheduler scheduler_;
  FakeStepExecutor fake_;
  std::vector<std::unique_ptr<Sequence>> seqs_;
};

std::vector<int32_t> Prompt(int length, int salt) {
  std::vector<int32_t> prompt;
  for (int i = 0; i < length; ++i) prompt.push_back((i * 31 + salt * 7) % kVocab);
  return prompt;
}

TEST(SchedulerTest, NewSequencesInFullThenDeltas) {
  Harness h(16, 4, 0, {64, 8});
  h.Add(Prompt(5, 1), 3);
  worker::v1::StepPlan first = h.Step();
  EXPECT_EQ(first.step(), 1u);
  ASSERT_EQ(first.new_sequences_size(), 1);
  EXPECT_EQ(first.new_sequences(0).token_ids_size(), 5);
  EXPECT_EQ(first.new_sequences(0).num_new_tokens(), 5);
  EXPECT_EQ(first.new_sequences(0).block_table_size(), 2);
  worker::v1::StepPlan second = h.Step();
  EXPECT_EQ(second.step(), 2u);
  ASSERT_EQ(second.running_size(), 1);
  EXPECT_EQ(second.running(0).new_token_ids_size(), 1);
  EXPECT_EQ(second.running(0).num_new_tokens(), 1);
  h.RunToEnd();
  h.ExpectSoloOutputs();
}

TEST(SchedulerTest, FinishedSequenceIsDroppedInTheNextPlan) {
  Harness h(16, 4, 0, {64, 8});
  h.Add(Prompt(3, 1), 1);
  h.Add(Prompt(3, 2), 4);
  h.Step();  // the first finishes at its first token
  worker::v1::StepPlan next = h.Step();
  ASSERT_EQ(next.drop_seq_ids_size(), 1);
  EXPECT_EQ(next.drop_seq_ids(0), 1u);
  h.RunToEnd();
  h.ExpectSoloOutputs();
}

TEST(SchedulerTest, ChunkedPrefillNeverBlocksDecodes) {
  Harness h(64, 4, 0, {8, 8});
  Sequence* decoder = h.Add(Prompt(4, 1), 20);
  h.Step();
  h.Add(Prompt(40, 2), 2);
  for (int i = 0; i < 5; ++i) {
    worker::v1::StepPlan plan = h.Step();
    ASSERT_GE(plan.running_size(), 1);
    EXPECT_EQ(plan.running(0).seq_id(), decoder->id());
    EXPECT_EQ(plan.running(0).num_new_tokens(), 1);
  }
  EXPECT_GT(h.fake_.num_partial_prefills(), 0);
  h.RunToEnd();
  h.ExpectSoloOutputs();
}

// A token budget below max_batch_tokens (a step-time target on a slow host) chunks
// prompts to it, yet every running decode still gets its token each step, and a prompt
// still advances by at least kMinPrefillTokens.
TEST(SchedulerTest, ATokenBudgetChunksPrefillsButKeepsEveryDecode) {
  Harness h(256, 4, 0, {512, 32});
  std::vector<Sequence*> decoders;
  for (int i = 0; i < 20; ++i) decoders.push_back(h.Add(Prompt(4, i), 30));
  h.Step();  // their prompts
  h.scheduler_.set_token_budget(24);
  h.Add(Prompt(300, 99), 2);
  for (int i = 0; i < 8; ++i) {
    worker::v1::StepPlan plan = h.Step();
    int64_t tokens = 0, decodes = 0;
    for (const auto& r : plan.running()) {
      tokens += r.num_new_tokens();
      decodes += r.num_new_tokens() == 1;
    }
    for (const auto& n : plan.new_sequences()) tokens += n.num_new_tokens();
    EXPECT_EQ(decodes, 20) << "step " << i;
    // 20 decodes leave 4 of the budget of 24: the floor of 16 prefill tokens applies.
    EXPECT_EQ(tokens, 20 + Scheduler::kMinPrefillTokens) << "step " << i;
  }
  h.scheduler_.set_token_budget(INT64_MAX);  // back to max_batch_tokens
  h.RunToEnd();
  h.ExpectSoloOutputs();
}

TEST(SchedulerTest, AdmitsInFifoOrderUpToMaxSequences) {
  Harness h(64, 4, 0, {64, 2});
  for (int i = 0; i < 4; ++i) h.Add(Prompt(3, i), 2);
  worker::v1::StepPlan first = h.Step();
  ASSERT_EQ(first.new_sequences_size(), 2);
  EXPECT_EQ(first.new_sequences(0).seq_id(), 1u);
  EXPECT_EQ(first.new_sequences(1).seq_id(), 2u);
  EXPECT_EQ(h.scheduler_.num_waiting(), 2);
  h.RunToEnd();
  h.ExpectSoloOutputs();
}

TEST(SchedulerTest, AdmissionKeepsTheWatermarkFree) {
  Harness h(4, 4, 2, {64, 8});
  h.Add(Prompt(4, 1), 2);
  h.Add(Prompt(4, 2), 2);
  worker::v1::StepPlan first = h.Step();
  EXPECT_EQ(first.new_sequences_size(), 2);  // 1 block each, 2 left as watermark
  EXPECT_EQ(h.blocks_.num_free_blocks(), 2);
  h.RunToEnd();
  h.ExpectSoloOutputs();
}

TEST(SchedulerTest, PreemptsTheNewestAndRecomputesIt) {
  Harness h(6, 4, 0, {64, 8});
  h.Add(Prompt(4, 1), 12);
  h.Add(Prompt(4, 2), 12);
  bool dropped_newest = false;
  for (int i = 0; i < 200 && h.scheduler_.HasWork(); ++i) {
    worker::v1::StepPlan plan = h.Step();
    for (uint64_t id : plan.drop_seq_ids()) dropped_newest |= id == 2 && plan.running_size() > 0;
  }
  EXPECT_TRUE(dropped_newest);
  EXPECT_GT(h.fake_.num_recomputes(), 0);
  EXPECT_GE(h.scheduler_.num_preemptions(), static_cast<uint64_t>(h.fake_.num_recomputes()));
  h.RunToEnd();
  h.ExpectSoloOutputs();
}

TEST(SchedulerTest, RandomWorkloadsMatchSoloRuns) {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 30; ++trial) {
    const int block_size = 1 + rng() % 5;
    const int batch = 1 + rng() % 24;
    const int max_len = 24;
    const int num_blocks = (max_len + block_size - 1) / block_size + rng() % 8;
    Harness h(num_blocks, block_size, rng() % 2, {batch, 1 + static_cast<int>(rng() % 6)});
    if (trial % 2 == 1) {  // staggered admission from some step cost model
      h.scheduler_.set_step_cost(absl::Milliseconds(rng() % 50),
                                 absl::Microseconds(1 + rng() % 3000));
    }
    for (int i = 0; i < 12; ++i) {
      const int prompt = 1 + rng() % 16;
      h.Add(Prompt(prompt, trial * 100 + i), 1 + rng() % (max_len - prompt));
    }
    h.RunToEnd();
    h.ExpectSoloOutputs();
    if (testing::Test::HasFailure()) return;
  }
}

// Prompt tokens a plan computes (new sequences' and chunks of running ones).
int64_t PrefillTokens(const worker::v1::StepPlan& plan) {
  int64_t tokens = 0;
  for (const auto& n : plan.new_sequences()) tokens += n.num_new_tokens();
  for (const auto& r : plan.running()) tokens += r.num_new_tokens() > 1 ? r.num_new_tokens() : 0;
  return tokens;
}

// A host whose step of n tokens costs 40 ms + 2 ms·n (a CPU: a token's compute weighs
// about as much as streaming the weights). Eight 64-token prompts at once are admitted
// one a step: each step's group is sqrt(Q·F'/c) tokens, Q the queued prompt tokens and
// F' = 40 ms plus the running decodes' 2 ms each, from 101 tokens down, under two prompts.
TEST(SchedulerTest, ABurstIsAdmittedInGroupsOnAHostWhereTokensCostMost) {
  Harness h(512, 4, 0, {2048, 32});
  h.scheduler_.set_step_cost(absl::Milliseconds(40), absl::Milliseconds(2));
  for (int i = 0; i < 8; ++i) h.Add(Prompt(64, i), 16);
  EXPECT_EQ(h.scheduler_.GroupTokens(), 101);  // sqrt(512 · 40 / 2)
  for (int i = 0; i < 8; ++i) {
    worker::v1::StepPlan plan = h.Step();
    ASSERT_EQ(plan.new_sequences_size(), 1) << "step " << i;
    EXPECT_EQ(plan.new_sequences(0).seq_id(), static_cast<uint64_t>(i + 1));  // FIFO
    EXPECT_EQ(plan.running_size(), i);  // the earlier ones decode meanwhile
  }
  h.RunToEnd();
  h.ExpectSoloOutputs();
}

// A host whose steps cost mostly their fixed part (a GPU: the weights streamed once
// whatever the batch, 20 ms, and 10 µs a token) takes the same burst in one step.
TEST(SchedulerTest, ABurstIsAdmittedAtOnceWhereTheStepsFixedCostDominates) {
  Harness h(512, 4, 0, {2048, 32});
  h.scheduler_.set_step_cost(absl::Milliseconds(20), absl::Microseconds(10));
  for (int i = 0; i < 8; ++i) h.Add(Prompt(64, i), 16);
  EXPECT_EQ(h.Step().new_sequences_size(), 8);
  h.RunToEnd();
  h.ExpectSoloOutputs();
}

TEST(SchedulerTest, WithoutAStepCostModelTheBudgetAloneLimitsAdmission) {
  Harness h(512, 4, 0, {2048, 32});
  EXPECT_EQ(h.scheduler_.GroupTokens(), INT64_MAX);
  for (int i = 0; i < 8; ++i) h.Add(Prompt(64, i), 16);
  EXPECT_EQ(h.Step().new_sequences_size(), 8);
  h.scheduler_.set_step_cost(absl::Milliseconds(40), absl::ZeroDuration());  // c unknown
  EXPECT_EQ(h.scheduler_.GroupTokens(), INT64_MAX);
  h.RunToEnd();
  h.ExpectSoloOutputs();
}

// A prompt being prefilled in chunks is the step's first group: a waiting one joins it
// only within the group size.
TEST(SchedulerTest, AChunkedPromptCountsIntoItsStepsGroup) {
  Harness h(512, 4, 0, {96, 32});
  h.scheduler_.set_step_cost(absl::Milliseconds(40), absl::Milliseconds(2));
  h.Add(Prompt(200, 1), 4);
  EXPECT_EQ(PrefillTokens(h.Step()), 96);  // a chunk; 104 left
  h.Add(Prompt(8, 2), 4);
  // Q = 104 + 8, F' = 40 ms: a group of sqrt(112 · 20) = 47 tokens; the chunk takes 96.
  worker::v1::StepPlan plan = h.Step();
  EXPECT_EQ(plan.new_sequences_size(), 0);
  EXPECT_EQ(PrefillTokens(plan), 96);
  h.RunToEnd();
  h.ExpectSoloOutputs();
}

// Closed-loop clients on the modelled CPU host (steps of 40 ms + 2 ms·n, clocked by the
// model): eight clients each send a 64-token prompt for 16 tokens, and again as soon as
// it ends, 40 requests in all. Admitted whole, a burst stays a burst (all eight finish
// in one step and return together) and every prompt waits for the step that computes
// all of them; staggered, the groups spread the clients out, and later prompts are
// prefilled one a step beside the others' decodes. The mean time to first token falls
// to under half, and the run takes about as long (the same tokens computed, a few more
// steps' fixed cost).
TEST(SchedulerTest, StaggeredAdmissionHalvesTheMeanTtftOfClosedLoopClients) {
  struct Run {
    double mean_ttft = 0;
    double seconds = 0;
  };
  auto run = [](bool staggered) {
    Harness h(2048, 4, 0, {2048, 32});
    const absl::Duration fixed = absl::Milliseconds(40), per_token = absl::Milliseconds(2);
    if (staggered) h.scheduler_.set_step_cost(fixed, per_token);
    double now = 0, ttft_sum = 0;
    int sent = 0, first_tokens = 0;
    std::vector<double> arrival;
    auto send = [&] {
      h.Add(Prompt(64, sent), 16);
      arrival.push_back(now);
      ++sent;
    };
    for (int i = 0; i < 8; ++i) send();
    while (h.scheduler_.HasWork()) {
      std::vector<bool> had_token(h.seqs_.size());
      for (size_t i = 0; i < h.seqs_.size(); ++i) had_token[i] = !h.seqs_[i]->output_ids().empty();
      const worker::v1::StepPlan plan = h.Step();
      int64_t tokens = 0;
      for (const auto& n : plan.new_sequences()) tokens += n.num_new_tokens();
      for (const auto& r : plan.running()) tokens += r.num_new_tokens();
      now += absl::ToDoubleSeconds(fixed + per_token * tokens);
      for (size_t i = 0; i < had_token.size(); ++i) {
        if (had_token[i] || h.seqs_[i]->output_ids().empty()) continue;
        ttft_sum += now - arrival[i];
        ++first_tokens;
      }
      int finished_now = 0;
      for (const auto& r : plan.running()) {
        const Sequence& seq = *h.seqs_[r.seq_id() - 1];
        finished_now += seq.status() == SequenceStatus::kFinished;
      }
      for (const auto& n : plan.new_sequences()) {
        finished_now += h.seqs_[n.seq_id() - 1]->status() == SequenceStatus::kFinished;
      }
      for (int i = 0; i < finished_now && sent < 40; ++i) send();
    }
    h.ExpectSoloOutputs();
    EXPECT_EQ(first_tokens, 40);
    return Run{ttft_sum / first_tokens, now};
  };
  const Run whole = run(false), staggered = run(true);
  EXPECT_LT(staggered.mean_ttft, 0.5 * whole.mean_ttft)
      << staggered.mean_ttft << " s against " << whole.mean_ttft << " s";
  EXPECT_LT(staggered.seconds, 1.05 * whole.seconds)
      << staggered.seconds << " s against " << whole.seconds << " s";
  std::printf("mean TTFT %.3f s staggered, %.3f s whole; run %.2f s / %.2f s\n",
              staggered.mean_ttft, whole.mean_ttft, staggered.seconds, whole.seconds);
}

// `prefix` then `tail`.
std::vector<int32_t> Concat(std::vector<int32_t> prefix, const std::vector<int32_t>& tail) {
  prefix.insert(prefix.end(), tail.begin(), tail.end());
  return prefix;
}

TEST(SchedulerPrefixCacheTest, SharedWholeBlocksAreNotRecomputed) {
  Harness h(32, 4, 0, {64, 8}, /*prefix_caching=*/true);
  const std::vector<int32_t> system = Prompt(10, 1);  // 2 whole blocks and 2 tokens
  h.Add(Concat(system, Prompt(3, 2)), 2);
  h.RunToEnd();
  EXPECT_EQ(h.blocks_.num_cached_blocks(), 3);  // 13 prompt + 1 computed output: 3 full
  Sequence* second = h.Add(Concat(system, Prompt(5, 3)), 2);
  worker::v1::StepPlan plan = h.Step();
  ASSERT_EQ(plan.new_sequences_size(), 1);
  EXPECT_EQ(plan.new_sequences(0).num_cached_tokens(), 8);
  EXPECT_EQ(plan.new_sequences(0).num_new_tokens(), 15 - 8);
  EXPECT_EQ(second->num_cached_prompt_tokens(), 8);
  h.RunToEnd();
  h.ExpectSoloOutputs();
  EXPECT_EQ(h.fake_.num_cached_positions(), 8);
  EXPECT_EQ(h.scheduler_.prefix_cache_stats().queried_tokens, 13u + 15u);
  EXPECT_EQ(h.scheduler_.prefix_cache_stats().hit_tokens, 8u);
}

TEST(SchedulerPrefixCacheTest, AWhollyCachedPromptStillComputesItsLastToken) {
  Harness h(32, 4, 0, {64, 8}, /*prefix_caching=*/true);
  h.Add(Prompt(8, 1), 3);
  h.RunToEnd();
  h.Add(Prompt(8, 1), 3);  // the same 2 blocks: only the first may be shared
  worker::v1::StepPlan plan = h.Step();
  ASSERT_EQ(plan.new_sequences_size(), 1);
  EXPECT_EQ(plan.new_sequences(0).num_cached_tokens(), 4);
  EXPECT_EQ(plan.new_sequences(0).num_new_tokens(), 4);
  h.RunToEnd();
  h.ExpectSoloOutputs();
}

TEST(SchedulerPrefixCacheTest, PromptLogprobsComputeTheWholePrompt) {
  Harness h(32, 4, 0, {64, 8}, /*prefix_caching=*/true);
  h.Add(Prompt(12, 1), 2);
  h.RunToEnd();
  h.Add(Prompt(12, 1), 2, /*prompt_logprobs=*/0);
  worker::v1::StepPlan plan = h.Step();
  ASSERT_EQ(plan.new_sequences_size(), 1);
  EXPECT_EQ(plan.new_sequences(0).num_cached_tokens(), 0);
  EXPECT_EQ(plan.new_sequences(0).num_new_tokens(), 12);
  h.RunToEnd();
  h.ExpectSoloOutputs();
}

TEST(SchedulerPrefixCacheTest, RunningSequencesShareAPrefixComputedOnce) {
  Harness h(32, 4, 0, {64, 8}, /*prefix_caching=*/true);
  const std::vector<int32_t> system = Prompt(8, 1);
  h.Add(Concat(system, Prompt(2, 2)), 6);
  h.Step();  // prefilled; its blocks 0 and 1 are cached, it keeps decoding
  h.Add(Concat(system, Prompt(3, 3)), 6);
  h.Add(Concat(system, Prompt(1, 4)), 6);
  worker::v1::StepPlan plan = h.Step();
  ASSERT_EQ(plan.new_sequences_size(), 2);
  for (const worker::v1::NewSequence& added : plan.new_sequences()) {
    EXPECT_EQ(added.num_cached_tokens(), 8);
    EXPECT_EQ(added.block_table(0), plan.new_sequences(0).block_table(0));
    EXPECT_EQ(added.block_table(1), plan.new_sequences(0).block_table(1));
  }
  h.RunToEnd();
  h.ExpectSoloOutputs();
  EXPECT_EQ(h.fake_.num_cached_positions(), 16);
}

TEST(SchedulerPrefixCacheTest, ABurstWithOneSystemPromptComputesItOnce) {
  Harness h(64, 4, 0, {64, 8}, /*prefix_caching=*/true);
  const std::vector<int32_t> system = Prompt(12, 1);
  for (int i = 0; i < 4; ++i) h.Add(Concat(system, Prompt(2, 10 + i)), 3);
  worker::v1::StepPlan first = h.Step();
  ASSERT_EQ(first.new_sequences_size(), 1);  // the others wait for its blocks
  worker::v1::StepPlan second = h.Step();
  ASSERT_EQ(second.new_sequences_size(), 3);
  for (const worker::v1::NewSequence& added : second.new_sequences()) {
    EXPECT_EQ(added.num_cached_tokens(), 12);
  }
  h.RunToEnd();
  h.ExpectSoloOutputs();
  EXPECT_EQ(h.fake_.num_cached_positions(), 36);
}

TEST(SchedulerPrefixCacheTest, ASequenceThatWaitedEnoughComputesTheBlockItself) {
  Harness h(64, 4, 0, {64, 8}, /*prefix_caching=*/true);
  const std::vector<int32_t> system = Prompt(12, 1);
  h.Add(Concat(system, {1}), 2);
  Sequence* follower = h.Add(Concat(system, {2}), 2);
  for (int i = 0; i < kMaxPrefixDeferrals; ++i) follower->count_prefix_deferral();
  worker::v1::StepPlan first = h.Step();
  ASSERT_EQ(first.new_sequences_size(), 2);  // no more waiting: both compute the prefix
  EXPECT_EQ(first.new_sequences(1).num_cached_tokens(), 0);
  h.RunToEnd();
  h.ExpectSoloOutputs();
}

TEST(SchedulerPrefixCacheTest, RandomWorkloadsWithSharedPrefixesMatchSoloRuns) {
  std::mt19937 rng(99);
  int64_t cached = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const int block_size = 1 + rng() % 5;
    const int max_len = 32;
    // From a cache that barely holds one sequence (preemption, eviction of blocks still
    // matchable) to a roomy one.
    const int num_blocks = (max_len + block_size - 1) / block_size + rng() % 24;
    Harness h(num_blocks, block_size, rng() % 2,
              {1 + static_cast<int>(rng() % 24), 1 + static_cast<int>(rng() % 6)},
              /*prefix_caching=*/true);
    std::vector<std::vector<int32_t>> systems;
    for (int s = 0; s < 3; ++s) systems.push_back(Prompt(1 + rng() % 14, trial * 10 + s));
    for (int i = 0; i < 16; ++i) {
      std::vector<int32_t> prompt = systems[rng() % systems.size()];
      if (rng() % 4 != 0) prompt = Concat(prompt, Prompt(rng() % 6, trial * 100 + i));
      const int max_tokens = 1 + rng() % (max_len - static_cast<int>(prompt.size()));
      h.Add(prompt, max_tokens, rng() % 6 == 0 ? 0 : -1);
      for (int steps = rng() % 4; steps > 0 && h.scheduler_.HasWork(); --steps) h.Step();
    }
    h.RunToEnd();
    h.ExpectSoloOutputs();
    cached += h.fake_.num_cached_positions();
    if (testing::Test::HasFailure()) return;
  }
  EXPECT_GT(cached, 0);
}

}  // namespace
}  // namespace tpserve
