// Engine tests for how requests end other than by finishing: abort, deadline, executor
// failure, a full queue, bad requests, Stop — and for stats.
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "server/engine.h"
#include "server/testing/engine_test_util.h"
#include "server/testing/fake_step_executor.h"

namespace tpserve {
namespace {

constexpr int kTestVocab = 1000;

TEST(EngineLifecycleTest, AbortFromACallbackCancelsAndFreesBlocks) {
  FakeExecutorConfig fake_config{/*num_blocks=*/256, /*block_size=*/4};
  fake_config.step_delay = absl::Milliseconds(1);
  TestEngine t(fake_config, Options(64, 8));
  Collector aborted, other;
  Engine* engine = t.engine.get();
  uint64_t aborted_id = 0;
  int seen = 0;
  auto id = engine->Submit(
      Request(4, 500, 1),
      [&, on_chunk = aborted.OnChunk()](EngineChunk chunk) {
        on_chunk(std::move(chunk));
        if (++seen == 3) engine->Abort(aborted_id);
      },
      aborted.OnDone());
  ASSERT_TRUE(id.ok());
  aborted_id = *id;
  ASSERT_TRUE(engine->Submit(Request(4, 40, 2), other.OnChunk(), other.OnDone()).ok());
  ASSERT_TRUE(aborted.WaitDone());
  EXPECT_EQ(aborted.status().code(), absl::StatusCode::kCancelled);
  EXPECT_LT(aborted.Tokens().size(), 10u);
  ASSERT_TRUE(other.WaitDone());
  EXPECT_TRUE(other.status().ok());
  EXPECT_FALSE(t.fake.holds(aborted_id));  // dropped by a later plan
  EXPECT_EQ(engine->stats().kv_blocks_in_use, 0);
  EXPECT_EQ(aborted.done_calls(), 1);
  EXPECT_TRUE(t.fake.errors().empty()) << t.fake.errors()[0];
}

TEST(EngineLifecycleTest, DeadlinesEndRequests) {
  FakeExecutorConfig fake_config{/*num_blocks=*/256, /*block_size=*/4};
  fake_config.step_delay = absl::Milliseconds(2);
  TestEngine t(fake_config, Options(64, 8));
  EngineRequest past = Request(4, 10, 1);
  past.deadline = absl::Now() - absl::Seconds(1);
  EngineRequest soon = Request(4, 500, 2);
  soon.deadline = absl::Now() + absl::Milliseconds(50);
  auto results = t.RunAll({past, soon});
  EXPECT_EQ(results[0]->status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(results[1]->status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_FALSE(results[1]->Tokens().empty());
  EXPECT_EQ(t.engine->stats().kv_blocks_in_use, 0);
  EXPECT_TRUE(t.engine->healthy());
}

TEST(EngineLifecycleTest, ExecutorFailureEndsEveryRequestUnavailable) {
  FakeExecutorConfig fake_config{/*num_blocks=*/256, /*block_size=*/4};
  fake_config.fail_at_step = 3;
  TestEngine t(fake_config, Options(16, 4));
  std::vector<EngineRequest> requests;
  for (int i = 0; i < 8; ++i) requests.push_back(Request(10, 20, i));
  auto results = t.RunAll(requests);
  for (const auto& result : results) {
    EXPECT_EQ(result->status().code(), absl::StatusCode::kUnavailable) << result->status();
    EXPECT_EQ(result->done_calls(), 1);
  }
  EXPECT_FALSE(t.engine->healthy());
  Collector late;
  EXPECT_EQ(t.engine->Submit(Request(4, 4, 9), late.OnChunk(), late.OnDone()).status().code(),
            absl::StatusCode::kUnavailable);
}

// on_failure runs once, after the engine turns unhealthy and before any request ends:
// the supervisor turns health NOT_SERVING there, ahead of every client's UNAVAILABLE.
TEST(EngineLifecycleTest, OnFailureRunsOnceBeforeAnyRequestEnds) {
  FakeExecutorConfig fake_config{/*num_blocks=*/256, /*block_size=*/4};
  fake_config.fail_at_step = 3;
  fake_config.step_delay = absl::Milliseconds(20);  // all 8 are in before step 3
  std::vector<std::unique_ptr<Collector>> results;
  for (int i = 0; i < 8; ++i) results.push_back(std::make_unique<Collector>());
  absl::Mutex mu;
  int failures = 0;
  int ended_before = -1;  // requests already ended when on_failure ran
  absl::Status reported;
  EngineOptions options = Options(16, 4);
  options.on_failure = [&](const absl::Status& status) {
    int ended = 0;
    for (const auto& result : results) ended += result->done_calls();
    absl::MutexLock lock(&mu);
    ++failures;
    ended_before = ended;
    reported = status;
  };
  TestEngine t(fake_config, options);
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(t.engine->Submit(Request(10, 20, i), results[i]->OnChunk(), results[i]->OnDone())
                    .ok());
  }
  for (const auto& result : results) {
    ASSERT_TRUE(result->WaitDone());
    EXPECT_EQ(result->status().code(), absl::StatusCode::kUnavailable) << result->status();
  }
  absl::MutexLock lock(&mu);
  EXPECT_EQ(failures, 1);
  EXPECT_EQ(ended_before, 0);
  EXPECT_EQ(reported.code(), absl::StatusCode::kUnavailable) << reported;
  EXPECT_NE(reported.message().find("step 3"), absl::string_view::npos) << reported;
}

// A rank 0 that answers against worker.proto: each way fails the step — every request
// ends UNAVAILABLE, the engine turns unhealthy — and none crashes the frontend or reaches
// a client (a duplicated answer once freed a finished sequence and then used it).
TEST(EngineLifecycleTest, MalformedResultsFailTheStepNotTheProcess) {
  using worker::v1::StepResult;
  const std::vector<std::pair<std::string, std::function<void(StepResult*)>>> faults = {
      {"duplicated answer",
       [](StepResult* r) {
         if (r->sequences_size() == 2) *r->mutable_sequences(1) = r->sequences(0);
       }},
      {"token past the vocabulary",
       [](StepResult* r) {
         for (auto& s : *r->mutable_sequences()) {
           if (s.has_token_id()) s.set_token_id(kTestVocab);
         }
       }},
      {"negative token",
       [](StepResult* r) {
         for (auto& s : *r->mutable_sequences()) {
           if (s.has_token_id()) s.set_token_id(-3);
         }
       }},
      {"logprobs missing", [](StepResult* r) {
         for (auto& s : *r->mutable_sequences()) s.clear_logprobs();
       }},
      {"NaN logprob", [](StepResult* r) {
         for (auto& s : *r->mutable_sequences()) {
           if (s.has_token_id()) s.mutable_logprobs()->mutable_chosen()->set_logprob(NAN);
         }
       }},
      {"more alternatives than asked", [](StepResult* r) {
         for (auto& s : *r->mutable_sequences()) {
           if (s.has_token_id()) s.mutable_logprobs()->add_top()->set_token_id(1);
         }
       }},
      {"prompt logprobs nobody asked for", [](StepResult* r) {
         for (auto& s : *r->mutable_sequences()) s.add_prompt_logprobs();
       }},
      {"a prompt logprob short", [](StepResult* r) {
         for (auto& s : *r->mutable_sequences()) {
           if (s.prompt_logprobs_size() > 0) s.mutable_prompt_logprobs()->RemoveLast();
         }
       }},
      {"the output of a sequence owed prompt logprobs left out", [](StepResult* r) {
         r->mutable_sequences()->DeleteSubrange(0, 1);
       }},
      {"an error with status OK", [](StepResult* r) {
         for (auto& s : *r->mutable_sequences()) {
           s.clear_token_id();
           s.clear_logprobs();
           s.clear_prompt_logprobs();
           s.mutable_error()->set_code(0);
         }
       }},
      {"an error beside a token", [](StepResult* r) {
         for (auto& s : *r->mutable_sequences()) s.mutable_error()->set_code(13);
       }},
  };
  for (const auto& [name, fault] : faults) {
    FakeExecutorConfig fake_config{/*num_blocks=*/64, /*block_size=*/4, kTestVocab};
    fake_config.corrupt = fault;
    EngineOptions options = Options(3, 8);  // the first step is a prefill chunk
    options.vocab_size = kTestVocab;
    // Both queued before the first step, so that every fault meets both sequences (a
    // busy host once let the first step start with one, whose duplicate was no fault).
    TestEngine t(fake_config, options, /*tokenizer=*/nullptr, /*start=*/false);
    std::vector<EngineRequest> requests = {Request(4, 6, 1), Request(5, 6, 2)};
    for (EngineRequest& r : requests) r.sampling.set_logprobs(2);
    requests[0].sampling.set_prompt_logprobs(1);
    requests[1].sampling.set_prompt_logprobs(-1);
    auto results = t.SubmitAll(requests);
    t.engine->Start();
    for (auto& result : results) ASSERT_TRUE(result->WaitDone()) << name;
    for (const auto& result : results) {
      EXPECT_EQ(result->status().code(), absl::StatusCode::kUnavailable)
          << name << ": " << result->status();
      EXPECT_TRUE(result->Tokens().empty()) << name << ": a bad answer reached a request";
    }
    EXPECT_FALSE(t.engine->healthy()) << name;
  }
}

// A rank's answer for `s`: its own failure, no token.
void FailAlone(worker::v1::SequenceOutput& s, absl::StatusCode code, const char* message) {
  s.clear_token_id();
  s.clear_logprobs();
  s.mutable_error()->set_code(static_cast<int>(code));
  s.mutable_error()->set_message(message);
}

// A rank's report that one sequence alone failed (its penalties overflowed its logits)
// ends that request with the rank's status and frees its blocks; the other sequences of
// the same steps get exactly the tokens they get alone, and the engine stays healthy.
TEST(EngineLifecycleTest, ASequencesOwnFailureEndsItAlone) {
  FakeExecutorConfig fake_config{/*num_blocks=*/64, /*block_size=*/4, kTestVocab};
  int tokens_of_second = 0;
  fake_config.corrupt = [&tokens_of_second](worker::v1::StepResult* r) {
    for (auto& s : *r->mutable_sequences()) {
      if (s.seq_id() != 2 || !s.has_token_id() || ++tokens_of_second < 3) continue;
      FailAlone(s, absl::StatusCode::kInvalidArgument,
                "sampling.repetition_penalty overflowed the logits");
    }
  };
  EngineOptions options = Options(64, 8);
  options.vocab_size = kTestVocab;
  TestEngine t(fake_config, options);
  const std::vector<EngineRequest> requests = {Request(4, 6, 1), Request(5, 6, 2),
                                               Request(6, 6, 3)};
  auto results = t.RunAll(requests);
  EXPECT_EQ(results[1]->status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(results[1]->status().message().find("repetition_penalty"), std::string::npos)
      << results[1]->status();
  EXPECT_EQ(results[1]->Tokens().size(), 2u);  // the two before the failure
  for (int i : {0, 2}) {
    EXPECT_TRUE(results[i]->status().ok()) << results[i]->status();
    EXPECT_EQ(results[i]->Tokens(), FakeStepExecutor::HashContinuation(requests[i].prompt_ids,
                                                                        6, kTestVocab));
  }
  EXPECT_TRUE(t.engine->healthy());
  EXPECT_EQ(t.engine->stats().kv_blocks_in_use, 0);
  // A later request runs as ever.
  auto after = t.RunAll({Request(3, 4, 9)});
  EXPECT_TRUE(after[0]->status().ok()) << after[0]->status();
}

// A warm-up request that fails alone (its logits not finite) does not fail the warm-up:
// the engine serves, and the failure is reported. A failed step does fail it.
TEST(EngineLifecycleTest, AWarmUpRequestFailingAloneIsReportedNotFatal) {
  FakeExecutorConfig fake_config{/*num_blocks=*/64, /*block_size=*/4, kTestVocab};
  fake_config.corrupt = [](worker::v1::StepResult* r) {
    for (auto& s : *r->mutable_sequences()) {
      if (s.seq_id() <= 2) FailAlone(s, absl::StatusCode::kInternal, "logits row is not finite");
    }
  };
  EngineOptions options = Options(64, 8);
  options.vocab_size = kTestVocab;
  TestEngine t(fake_config, options);
  absl::StatusOr<WarmupTimes> warm = t.engine->WarmUp(16, absl::Now() + absl::Seconds(30));
  ASSERT_TRUE(warm.ok()) << warm.status();
  EXPECT_EQ(warm->failed_alone.code(), absl::StatusCode::kInternal) << warm->failed_alone;
  EXPECT_TRUE(t.engine->healthy());
  EXPECT_EQ(t.engine->stats().kv_blocks_in_use, 0);
  auto after = t.RunAll({Request(3, 4, 9)});
  EXPECT_TRUE(after[0]->status().ok()) << after[0]->status();

  FakeExecutorConfig failing{/*num_blocks=*/64, /*block_size=*/4, kTestVocab};
  failing.fail_at_step = 2;
  TestEngine broken(failing, options);
  warm = broken.engine->WarmUp(16, absl::Now() + absl::Seconds(30));
  EXPECT_EQ(warm.status().code(), absl::StatusCode::kUnavailable) << warm.status();
  EXPECT_FALSE(broken.engine->healthy());
}

TEST(EngineLifecycleTest, FullQueueIsResourceExhaustedAndStopEndsTheRest) {
  FakeStepExecutor fake(FakeExecutorConfig{});
  EngineOptions options;
  options.max_queue = 2;
  auto engine = Engine::Create(options, &fake, nullptr);
  ASSERT_TRUE(engine.ok());  // not started: requests stay queued
  Collector a, b, c;
  EXPECT_TRUE((*engine)->Submit(Request(4, 4, 1), a.OnChunk(), a.OnDone()).ok());
  EXPECT_TRUE((*engine)->Submit(Request(4, 4, 2), b.OnChunk(), b.OnDone()).ok());
  EXPECT_EQ((*engine)->Submit(Request(4, 4, 3), c.OnChunk(), c.OnDone()).status().code(),
            absl::StatusCode::kResourceExhausted);
  (*engine)->Stop();
  (*engine)->Stop();
  for (Collector* collector : {&a, &b}) {
    ASSERT_TRUE(collector->WaitDone(absl::ZeroDuration()));
    EXPECT_EQ(collector->status().code(), absl::StatusCode::kUnavailable);
    EXPECT_EQ(collector->done_calls(), 1);
  }
  EXPECT_EQ(c.done_calls(), 0);
}

TEST(EngineLifecycleTest, StopEndsRequestsInFlight) {
  FakeExecutorConfig fake_config{/*num_blocks=*/256, /*block_size=*/4};
  fake_config.step_delay = absl::Milliseconds(1);
  TestEngine t(fake_config, Options(64, 8));
  Collector running;
  ASSERT_TRUE(t.engine->Submit(Request(4, 900, 1), running.OnChunk(), running.OnDone()).ok());
  absl::SleepFor(absl::Milliseconds(20));
  t.engine->Stop();
  ASSERT_TRUE(running.WaitDone(absl::ZeroDuration()));
  EXPECT_EQ(running.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(t.engine->healthy());
}

// The end of a drain's grace: every request, running or still queued, gets a last chunk
// with kCancelled and its usage, then OK; its blocks are freed and the engine serves on.
TEST(EngineLifecycleTest, CancelAllFinishesEveryRequestCancelled) {
  FakeExecutorConfig fake_config{/*num_blocks=*/256, /*block_size=*/4};
  fake_config.step_delay = absl::Milliseconds(1);
  TestEngine t(fake_config, Options(64, 1));  // one runs, the other waits
  Collector running, queued;
  ASSERT_TRUE(t.engine->Submit(Request(4, 900, 1), running.OnChunk(), running.OnDone()).ok());
  ASSERT_TRUE(t.engine->Submit(Request(4, 900, 2), queued.OnChunk(), queued.OnDone()).ok());
  absl::SleepFor(absl::Milliseconds(20));
  t.engine->CancelAll();
  for (Collector* c : {&running, &queued}) {
    ASSERT_TRUE(c->WaitDone());
    EXPECT_TRUE(c->status().ok()) << c->status();
    const std::vector<EngineChunk> chunks = c->chunks();  // a copy
    ASSERT_FALSE(chunks.empty());
    const EngineChunk& last = chunks.back();
    ASSERT_TRUE(last.finish_reason.has_value());
    EXPECT_EQ(*last.finish_reason, FinishReason::kCancelled);
    EXPECT_EQ(last.prompt_tokens, 4);
    EXPECT_EQ(last.completion_tokens, static_cast<int>(c->Tokens().size()));
    EXPECT_EQ(c->done_calls(), 1);
  }
  EXPECT_FALSE(running.Tokens().empty());
  EXPECT_LT(running.Tokens().size(), 900u);
  EXPECT_TRUE(queued.Tokens().empty());
  EXPECT_EQ(t.engine->stats().kv_blocks_in_use, 0);
  EXPECT_TRUE(t.engine->healthy());
  auto after = t.RunAll({Request(4, 5, 3)});
  EXPECT_TRUE(after[0]->status().ok());
  EXPECT_EQ(after[0]->Tokens().size(), 5u);
}

int CachedTokens(const Collector& c) {
  const std::vector<EngineChunk> chunks = c.chunks();
  return chunks.empty() ? -1 : chunks.back().cached_prompt_tokens;
}

// A reset between runs of one prompt: the run before it reuses the first run's blocks,
// the run after it computes its whole prompt again, with the same tokens; a reset while
// a request runs leaves it running to its own answer.
TEST(EngineLifecycleTest, ResetPrefixCacheMakesTheNextRunCold) {
  FakeExecutorConfig fake_config{/*num_blocks=*/64, /*block_size=*/4};
  TestEngine t(fake_config, Options(64, 8));
  const EngineRequest request = Request(17, 6, 1);
  auto first = t.RunAll({request});
  auto warm = t.RunAll({request});
  EXPECT_EQ(CachedTokens(*warm[0]), 16);
  EXPECT_GT(t.engine->stats().kv_blocks_cached, 0);
  absl::StatusOr<int64_t> dropped = t.engine->ResetPrefixCache(absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(dropped.ok()) << dropped.status();
  EXPECT_GE(*dropped, 4);
  auto cold = t.RunAll({request});
  EXPECT_EQ(CachedTokens(*cold[0]), 0);
  EXPECT_EQ(cold[0]->Tokens(), first[0]->Tokens());
  EXPECT_EQ(warm[0]->Tokens(), first[0]->Tokens());

  fake_config.step_delay = absl::Milliseconds(1);
  TestEngine slow(fake_config, Options(64, 8));
  Collector running;
  ASSERT_TRUE(slow.engine->Submit(Request(9, 40, 2), running.OnChunk(), running.OnDone()).ok());
  absl::SleepFor(absl::Milliseconds(10));
  ASSERT_TRUE(slow.engine->ResetPrefixCache(absl::Now() + absl::Seconds(10)).ok());
  ASSERT_TRUE(running.WaitDone());
  EXPECT_TRUE(running.status().ok()) << running.status();
  EXPECT_EQ(running.Tokens(), FakeStepExecutor::HashContinuation(Request(9, 40, 2).prompt_ids, 40,
                                                                 kTestVocab));
  EXPECT_TRUE(slow.fake.errors().empty()) << slow.fake.errors()[0];
  EXPECT_EQ(slow.engine->stats().kv_blocks_in_use, 0);
  slow.engine->Stop();
  EXPECT_EQ(slow.engine->ResetPrefixCache(absl::Now() + absl::Seconds(10)).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST(EngineLifecycleTest, SubmitRejectsRequestsThatCanNeverRun) {
  FakeStepExecutor fake(FakeExecutorConfig{/*num_blocks=*/4, /*block_size=*/4});
  EngineOptions options;
  options.limits.set_max_context(12);
  auto engine = Engine::Create(options, &fake, nullptr);
  ASSERT_TRUE(engine.ok());
  auto submit = [&](EngineRequest request) {
    return (*engine)->Submit(std::move(request), [](EngineChunk) {}, [](absl::Status) {});
  };
  EXPECT_EQ(submit(Request(0, 4, 1)).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(submit(Request(4, 0, 1)).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(submit(Request(8, 5, 1)).status().code(), absl::StatusCode::kInvalidArgument);
  options.limits.set_max_context(0);
  auto unbounded = Engine::Create(options, &fake, nullptr);
  ASSERT_TRUE(unbounded.ok());
  Collector c;  // 20 tokens > 4 blocks of 4
  EXPECT_EQ((*unbounded)->Submit(Request(10, 10, 1), c.OnChunk(), c.OnDone()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(EngineLifecycleTest, CreateValidatesOptions) {
  FakeStepExecutor fake(FakeExecutorConfig{});
  EngineOptions options;
  options.limits.set_max_batch_tokens(0);
  EXPECT_EQ(Engine::Create(options, &fake, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Engine::Create(EngineOptions(), nullptr, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(EngineLifecycleTest, StatsCountStepsBlocksAndComputeTime) {
  TestEngine t(FakeExecutorConfig{/*num_blocks=*/64, /*block_size=*/4}, Options(64, 8));
  auto results = t.RunAll({Request(6, 5, 1), Request(3, 7, 2)});
  const EngineStats stats = t.engine->stats();
  EXPECT_EQ(stats.kv_blocks_total, 64);
  EXPECT_EQ(stats.kv_blocks_in_use, 0);
  EXPECT_EQ(stats.running, 0);
  EXPECT_EQ(stats.waiting, 0);
  EXPECT_GE(stats.steps, 7u);
  EXPECT_EQ(stats.worker_compute_us, 7 * static_cast<int64_t>(stats.steps));
  EXPECT_GE(stats.step_wall_us, 0);
}

}  // namespace
}  // namespace tpserve
