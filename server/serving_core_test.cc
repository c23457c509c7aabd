// ServingCore's generations over a real Engine and a FakeStepExecutor: a sink sees every
// chunk then one on_done; Cancel ends the call at once, from any thread or from inside
// the sink, frees its KV and is recorded; a failing pool ends every completion; refusals
// reach no sink.
#include "server/serving_core.h"

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "server/testing/fake_step_executor.h"

namespace tpserve {
namespace {

constexpr int kVocab = 1000;

ServedModel Model() {
  ServedModel m;
  m.model_name = "fake";
  m.vocab_size = kVocab;
  m.kv_block_size = 4;
  m.limits = MakeBatchLimits(256, 256, 8);
  m.max_queue = 16;
  return m;
}

v1::GenerateRequest Request(int max_tokens, int n = 1) {
  v1::GenerateRequest r;
  for (int id : {5, 6, 7}) r.mutable_token_ids()->add_ids(id);
  r.mutable_sampling()->set_max_tokens(max_tokens);
  r.mutable_sampling()->set_temperature(0);
  if (n > 1) r.mutable_sampling()->set_n(n);
  return r;
}

// What a sink saw.
struct Seen {
  absl::Mutex mu;
  std::vector<EngineChunk> chunks;
  std::vector<absl::Status> done;
  bool chunk_after_done = false;
  absl::Notification finished;

  GenerateSink Sink(std::function<void(const EngineChunk&)> also = nullptr) {
    return GenerateSink{[this, also](const EngineChunk& c) {
                          {
                            absl::MutexLock lock(&mu);
                            if (!done.empty()) chunk_after_done = true;
                            chunks.push_back(c);
                          }
                          if (also) also(c);
                        },
                        [this](const absl::Status& s) {
                          {
                            absl::MutexLock lock(&mu);
                            done.push_back(s);
                          }
                          if (!finished.HasBeenNotified()) finished.Notify();
                        }};
  }
};

class ServingCoreTest : public ::testing::Test {
 protected:
  void Start(FakeExecutorConfig fake = {}) {
    fake.vocab_size = kVocab;
    fake.num_blocks = 64;
    executor_ = std::make_unique<FakeStepExecutor>(fake);
    EngineOptions options;
    options.limits.set_max_context(256);
    options.eos_token_ids = {};
    engine_ = *Engine::Create(options, executor_.get(), nullptr);
    engine_->Start();
    core_ = std::make_unique<ServingCore>(Model(), nullptr);
    core_->SetEngine(engine_);
  }
  void TearDown() override {
    if (engine_) engine_->Stop();
  }

  void ExpectNothingHeld() {
    for (int i = 0; i < 300; ++i) {
      const EngineStats stats = engine_->stats();
      if (stats.kv_blocks_in_use == 0 && stats.running + stats.waiting == 0 &&
          core_->generating() == 0) {
        break;
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    EXPECT_EQ(engine_->stats().kv_blocks_in_use, 0);
    EXPECT_EQ(engine_->stats().running + engine_->stats().waiting, 0);
    EXPECT_EQ(core_->generating(), 0);
  }

  std::unique_ptr<FakeStepExecutor> executor_;
  std::shared_ptr<Engine> engine_;
  std::unique_ptr<ServingCore> core_;
};

TEST_F(ServingCoreTest, EveryChunkOfEveryCompletionThenOneDone) {
  Start();
  Seen seen;
  auto call = core_->StartGenerate(Request(5, 3), absl::InfiniteFuture(), seen.Sink());
  ASSERT_TRUE(call.ok()) << call.status();
  seen.finished.WaitForNotification();
  absl::MutexLock lock(&seen.mu);
  ASSERT_EQ(seen.done.size(), 1u);
  EXPECT_TRUE(seen.done[0].ok()) << seen.done[0];
  int tokens[3] = {0, 0, 0};
  int finished = 0;
  for (const EngineChunk& c : seen.chunks) {
    ASSERT_GE(c.index, 0);
    ASSERT_LT(c.index, 3);
    tokens[c.index] += static_cast<int>(c.token_ids.size());
    finished += c.finish_reason.has_value();
  }
  EXPECT_EQ(finished, 3);
  for (int t : tokens) EXPECT_EQ(t, 5);
  EXPECT_TRUE(absl::StrContains(core_->RenderMetrics(), "tpserve_requests_total{code=\"OK\"} 1"));
}

TEST_F(ServingCoreTest, CancelFromAnotherThreadEndsTheCallAtOnceAndFreesItsKv) {
  FakeExecutorConfig fake;
  fake.step_delay = absl::Milliseconds(5);
  Start(fake);
  Seen seen;
  absl::Notification first;
  auto call = core_->StartGenerate(Request(200, 2), absl::InfiniteFuture(),
                                   seen.Sink([&](const EngineChunk&) {
                                     if (!first.HasBeenNotified()) first.Notify();
                                   }));
  ASSERT_TRUE(call.ok());
  first.WaitForNotification();
  (*call)->Cancel(absl::CancelledError("client left"));
  {
    absl::MutexLock lock(&seen.mu);
    ASSERT_EQ(seen.done.size(), 1u);  // on_done ran inside Cancel
    EXPECT_TRUE(absl::IsCancelled(seen.done[0]));
  }
  (*call)->Cancel(absl::CancelledError("again"));  // idempotent
  ExpectNothingHeld();
  absl::MutexLock lock(&seen.mu);
  EXPECT_EQ(seen.done.size(), 1u);
  EXPECT_FALSE(seen.chunk_after_done);
  EXPECT_TRUE(
      absl::StrContains(core_->RenderMetrics(), "tpserve_requests_total{code=\"CANCELLED\"} 1"));
}

TEST_F(ServingCoreTest, CancelFromInsideTheSinkRunsOnDoneAfterTheChunk) {
  FakeExecutorConfig fake;
  fake.step_delay = absl::Milliseconds(2);
  Start(fake);
  Seen seen;
  absl::Mutex mu;
  std::shared_ptr<GenerateCall> handle;
  std::atomic<bool> inside{false};
  bool done_inside_chunk = false;
  GenerateSink sink = seen.Sink([&](const EngineChunk&) {
    absl::MutexLock lock(&mu);
    if (handle == nullptr) return;
    inside = true;
    handle->Cancel(absl::CancelledError("the sink gave up"));
    {
      absl::MutexLock seen_lock(&seen.mu);
      done_inside_chunk = !seen.done.empty();
    }
    inside = false;
  });
  auto call = core_->StartGenerate(Request(100), absl::InfiniteFuture(), std::move(sink));
  ASSERT_TRUE(call.ok());
  {
    absl::MutexLock lock(&mu);
    handle = *call;
  }
  seen.finished.WaitForNotification();
  EXPECT_FALSE(done_inside_chunk);  // deferred until the chunk callback returned
  ExpectNothingHeld();
  absl::MutexLock lock(&seen.mu);
  ASSERT_EQ(seen.done.size(), 1u);
  EXPECT_TRUE(absl::IsCancelled(seen.done[0]));
  EXPECT_FALSE(seen.chunk_after_done);
}

TEST_F(ServingCoreTest, AFailingPoolEndsTheCallOnceWithItsError) {
  FakeExecutorConfig fake;
  fake.fail_at_step = 3;
  Start(fake);
  Seen seen;
  auto call = core_->StartGenerate(Request(50, 4), absl::InfiniteFuture(), seen.Sink());
  ASSERT_TRUE(call.ok());
  seen.finished.WaitForNotification();
  absl::SleepFor(absl::Milliseconds(50));  // anything late would show now
  absl::MutexLock lock(&seen.mu);
  ASSERT_EQ(seen.done.size(), 1u);
  EXPECT_TRUE(absl::IsUnavailable(seen.done[0])) << seen.done[0];
  EXPECT_FALSE(seen.chunk_after_done);
  EXPECT_EQ(core_->generating(), 0);
}

TEST_F(ServingCoreTest, RefusalsReachNoSinkAndAreRecorded) {
  Start();
  Seen seen;
  v1::GenerateRequest bad = Request(5);
  bad.mutable_sampling()->set_top_p(2);
  auto refused = core_->StartGenerate(bad, absl::InfiniteFuture(), seen.Sink());
  EXPECT_TRUE(absl::IsInvalidArgument(refused.status())) << refused.status();
  core_->StopAccepting();
  auto draining = core_->StartGenerate(Request(5), absl::InfiniteFuture(), seen.Sink());
  EXPECT_TRUE(absl::IsUnavailable(draining.status()));
  EXPECT_FALSE(core_->serving());
  absl::MutexLock lock(&seen.mu);
  EXPECT_TRUE(seen.chunks.empty());
  EXPECT_TRUE(seen.done.empty());
  EXPECT_EQ(core_->generating(), 0);
  const std::string metrics = core_->RenderMetrics();
  EXPECT_TRUE(absl::StrContains(metrics, "code=\"INVALID_ARGUMENT\"} 1")) << metrics;
  EXPECT_TRUE(absl::StrContains(metrics, "code=\"UNAVAILABLE\"} 1")) << metrics;
}

TEST_F(ServingCoreTest, TheDeadlineEndsTheCall) {
  FakeExecutorConfig fake;
  fake.step_delay = absl::Milliseconds(5);
  Start(fake);
  Seen seen;
  auto call = core_->StartGenerate(Request(200), absl::Now() + absl::Milliseconds(50),
                                   seen.Sink());
  ASSERT_TRUE(call.ok());
  seen.finished.WaitForNotification();
  absl::MutexLock lock(&seen.mu);
  EXPECT_TRUE(absl::IsDeadlineExceeded(seen.done[0])) << seen.done[0];
}

// The value of sample `name` (no labels) in the exposition text, -1 when absent.
double MetricValue(const std::string& text, const std::string& name) {
  const size_t at = text.find("\n" + name + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + name.size() + 2));
}

// The engine's stage times of each finished completion fit the call as its sink saw it
// (queue ≥ 0, queue + prefill ≤ its time to first token, all three ≤ its whole time),
// and the histograms count each completion once, each gap between its tokens once, and
// sum its usage.
TEST_F(ServingCoreTest, StageTimesFitTheCallAndFillTheHistograms) {
  FakeExecutorConfig fake;
  fake.step_delay = absl::Milliseconds(5);
  Start(fake);
  Seen seen;
  const absl::Time start = absl::Now();
  std::vector<double> first_token_s(2, -1);
  auto call = core_->StartGenerate(Request(6, 2), absl::InfiniteFuture(),
                                   seen.Sink([&](const EngineChunk& c) {
                                     if (first_token_s[c.index] < 0 && !c.token_ids.empty()) {
                                       first_token_s[c.index] =
                                           absl::ToDoubleSeconds(absl::Now() - start);
                                     }
                                   }));
  ASSERT_TRUE(call.ok()) << call.status();
  seen.finished.WaitForNotification();
  const double duration_s = absl::ToDoubleSeconds(absl::Now() - start);
  absl::MutexLock lock(&seen.mu);
  int finished = 0;
  for (const EngineChunk& c : seen.chunks) {
    if (!c.finish_reason.has_value()) continue;
    ++finished;
    const StageTimes& t = c.timing;
    EXPECT_GE(t.queue_s, 0);
    EXPECT_GE(t.prefill_s, 0.005);  // at least its prompt's step
    EXPECT_GE(t.decode_s, 5 * 0.005);  // five more steps
    EXPECT_LE(t.queue_s + t.prefill_s, first_token_s[c.index]);
    EXPECT_LE(t.queue_s + t.prefill_s + t.decode_s, duration_s);
  }
  EXPECT_EQ(finished, 2);
  const std::string text = "\n" + core_->RenderMetrics();
  for (const char* stage : {"queue", "prefill", "decode"}) {
    const std::string name = absl::StrCat("tpserve_request_", stage, "_time_seconds");
    EXPECT_EQ(MetricValue(text, name + "_count"), 2) << name;
    EXPECT_GE(MetricValue(text, name + "_sum"), 0) << name;
  }
  EXPECT_LE(MetricValue(text, "tpserve_request_queue_time_seconds_sum") +
                MetricValue(text, "tpserve_request_prefill_time_seconds_sum") +
                MetricValue(text, "tpserve_request_decode_time_seconds_sum"),
            2 * duration_s);
  EXPECT_EQ(MetricValue(text, "tpserve_inter_token_latency_seconds_count"), 2 * 5);
  EXPECT_LE(MetricValue(text, "tpserve_inter_token_latency_seconds_sum"), 2 * duration_s);
  EXPECT_EQ(MetricValue(text, "tpserve_request_prompt_tokens_sum"), 2 * 3);
  EXPECT_EQ(MetricValue(text, "tpserve_request_generation_tokens_sum"), 2 * 6);
  EXPECT_EQ(MetricValue(text, "tpserve_request_generation_tokens_count"), 2);
}

}  // namespace
}  // namespace tpserve
