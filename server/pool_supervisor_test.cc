#include "server/pool_supervisor.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "server/testing/engine_test_util.h"
#include "server/testing/fake_step_executor.h"

namespace tpserve {
namespace {

// What the test sees of a FakePool, also after the supervisor destroyed it.
struct PoolState {
  std::atomic<bool> healthy{true};
  std::atomic<bool> shut_down{false};
  std::atomic<bool> steps_fail{false};  // a rank that loads but fails every step
  std::atomic<int> steps{0};            // steps run
};

// A FakeStepExecutor whose health the test controls.
class FakePool final : public SupervisedPool {
 public:
  explicit FakePool(std::shared_ptr<PoolState> state) : state_(std::move(state)) {}
  absl::StatusOr<worker::v1::StepResult> RunStep(const worker::v1::StepPlan& plan) override {
    if (!healthy()) return absl::UnavailableError("rank 1 died");
    if (state_->steps_fail) return absl::InternalError("rank 0: illegal instruction");
    ++state_->steps;
    return executor_.RunStep(plan);
  }
  int num_kv_blocks() const override { return executor_.num_kv_blocks(); }
  int kv_block_size() const override { return executor_.kv_block_size(); }
  bool healthy() const override { return state_->healthy && !state_->shut_down; }
  void Shutdown(const std::string&) override { state_->shut_down = true; }

 private:
  std::shared_ptr<PoolState> state_;
  FakeStepExecutor executor_{FakeExecutorConfig{}};
};

class PoolSupervisorTest : public ::testing::Test {
 protected:
  PoolSupervisorOptions Options(bool exit_on_failure) {
    PoolSupervisorOptions o;
    o.engine.limits.set_max_context(64);
    o.exit_on_pool_failure = exit_on_failure;
    o.health_poll = absl::Milliseconds(5);
    o.restart_backoff = absl::Milliseconds(5);
    return o;
  }

  // Starts FakePools; generations in `failing` fail to start, those in `broken` fail
  // every step.
  PoolFactory Factory(std::vector<int> failing = {}, std::vector<int> broken = {}) {
    return [this, failing, broken](int generation, std::function<void()> lost)
               -> absl::StatusOr<std::unique_ptr<SupervisedPool>> {
      absl::MutexLock lock(&mu_);
      generations_.push_back(generation);
      losts_.push_back(std::move(lost));
      for (int g : failing) {
        if (g == generation) return absl::UnavailableError("rank 0 did not attach");
      }
      pools_.push_back(std::make_shared<PoolState>());
      pools_.back()->steps_fail =
          std::find(broken.begin(), broken.end(), generation) != broken.end();
      return std::unique_ptr<SupervisedPool>(new FakePool(pools_.back()));
    };
  }

  void OnServing(std::shared_ptr<Engine> engine) {
    absl::MutexLock lock(&mu_);
    serving_.push_back(engine != nullptr);
    if (engine) {
      EXPECT_TRUE(engine->healthy());
      steps_when_served_.push_back(pools_.back()->steps);
    }
  }

  // Waits until `count` serving changes were seen.
  void AwaitChanges(size_t count) {
    absl::MutexLock lock(&mu_);
    auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return serving_.size() >= count; };
    ASSERT_TRUE(mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(30)));
  }

  std::shared_ptr<PoolState> pool(int i) {
    absl::MutexLock lock(&mu_);
    return pools_.at(i);
  }

  absl::Mutex mu_;
  std::vector<int> generations_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<PoolState>> pools_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> serving_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void()>> losts_ ABSL_GUARDED_BY(mu_);  // per generation started
  std::vector<int> steps_when_served_ ABSL_GUARDED_BY(mu_);  // the pool's, as it was announced
};

// Each generation serves warmed up: its engine ran the warm-up's four steps (two
// prefills, two decodes) before it was announced; with warmup_tokens 0, none.
TEST_F(PoolSupervisorTest, AGenerationServesWarmedUp) {
  for (const int tokens : {64, 0}) {
    SCOPED_TRACE(tokens);
    PoolSupervisorOptions options = Options(false);
    options.warmup_tokens = tokens;
    PoolSupervisor supervisor(options, Factory(), nullptr,
                              [this](std::shared_ptr<Engine> e) { OnServing(std::move(e)); });
    std::thread run([&] { EXPECT_TRUE(supervisor.Run().ok()); });
    AwaitChanges(1);
    pool(0)->healthy = false;
    AwaitChanges(3);  // generation 1 serving
    supervisor.Stop();
    run.join();
    absl::MutexLock lock(&mu_);
    EXPECT_EQ(steps_when_served_, (std::vector<int>(2, tokens > 0 ? 4 : 0)));
    serving_.clear();
    pools_.clear();
    generations_.clear();
    losts_.clear();
    steps_when_served_.clear();
  }
}

// A pool whose ranks load but cannot run a step never serves: the first generation's
// warm-up failure is returned (tpserve exits 1), its pool shut down; a later
// generation's is retried.
TEST_F(PoolSupervisorTest, AFailedWarmUpFailsTheStart) {
  {
    PoolSupervisor supervisor(Options(false), Factory({}, {0}), nullptr,
                              [this](std::shared_ptr<Engine> e) { OnServing(std::move(e)); });
    const absl::Status result = supervisor.Run();
    EXPECT_EQ(result.code(), absl::StatusCode::kUnavailable) << result;
    EXPECT_NE(result.message().find("warm-up: "), absl::string_view::npos) << result;
    EXPECT_NE(result.message().find("illegal instruction"), absl::string_view::npos) << result;
    EXPECT_TRUE(pool(0)->shut_down);
    absl::MutexLock lock(&mu_);
    EXPECT_TRUE(serving_.empty());
    generations_.clear();
    pools_.clear();
    losts_.clear();
  }
  PoolSupervisor supervisor(Options(false), Factory({}, {1}), nullptr,
                            [this](std::shared_ptr<Engine> e) { OnServing(std::move(e)); });
  std::thread run([&] { EXPECT_TRUE(supervisor.Run().ok()); });
  AwaitChanges(1);
  pool(0)->healthy = false;
  AwaitChanges(3);  // generation 1's warm-up failed; generation 2 serves
  EXPECT_TRUE(pool(1)->shut_down);
  supervisor.Stop();
  run.join();
  absl::MutexLock lock(&mu_);
  EXPECT_EQ(generations_, (std::vector<int>{0, 1, 2}));
}

// A pool that reports its failure is seen at once, not at the next health poll.
TEST_F(PoolSupervisorTest, AReportedFailureEndsServingWithoutWaitingForThePoll) {
  PoolSupervisorOptions options = Options(false);
  options.health_poll = absl::Seconds(30);
  PoolSupervisor supervisor(options, Factory(), nullptr,
                            [this](std::shared_ptr<Engine> e) { OnServing(std::move(e)); });
  std::thread run([&] { EXPECT_TRUE(supervisor.Run().ok()); });
  AwaitChanges(1);
  const absl::Time start = absl::Now();
  pool(0)->healthy = false;
  std::function<void()> lost;
  {
    absl::MutexLock lock(&mu_);
    lost = losts_.at(0);
  }
  lost();
  AwaitChanges(2);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));  // the poll alone would take 30 s
  supervisor.Stop();
  run.join();
}

// A step that fails (a rank died mid-step; the pool has not reported it) turns serving
// off before any of its requests ends: a client that saw UNAVAILABLE and then asks for
// health finds NOT_SERVING, not the poll's stale SERVING.
TEST_F(PoolSupervisorTest, AFailedStepEndsServingBeforeItsRequestsEnd) {
  PoolSupervisorOptions options = Options(false);
  options.health_poll = absl::Seconds(30);
  std::shared_ptr<Engine> engine;
  PoolSupervisor supervisor(options, Factory(), nullptr, [&](std::shared_ptr<Engine> e) {
    absl::MutexLock lock(&mu_);
    if (e != nullptr && engine == nullptr) engine = e;
    serving_.push_back(e != nullptr);
  });
  std::thread run([&] { EXPECT_TRUE(supervisor.Run().ok()); });
  AwaitChanges(1);
  pool(0)->healthy = false;
  std::vector<bool> serving_when_done;
  Collector result;
  Engine::DoneCallback done = result.OnDone();
  std::shared_ptr<Engine> serving_engine;
  {
    absl::MutexLock lock(&mu_);
    serving_engine = engine;
  }
  ASSERT_TRUE(serving_engine
                  ->Submit(Request(4, 4, 1), result.OnChunk(),
                           [&](absl::Status status) {
                             {
                               absl::MutexLock lock(&mu_);
                               serving_when_done = serving_;
                             }
                             done(std::move(status));
                           })
                  .ok());
  ASSERT_TRUE(result.WaitDone());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(serving_when_done, (std::vector<bool>{true, false}));
  supervisor.Stop();
  run.join();
  absl::MutexLock lock(&mu_);
  EXPECT_EQ(serving_.at(1), false);
  EXPECT_EQ(std::count(serving_.begin(), serving_.begin() + 2, false), 1);  // said once
}

// A past generation's late report does not touch the generation serving now.
TEST_F(PoolSupervisorTest, APastGenerationsLateReportIsIgnored) {
  PoolSupervisor supervisor(Options(false), Factory(), nullptr,
                            [this](std::shared_ptr<Engine> e) { OnServing(std::move(e)); });
  std::thread run([&] { EXPECT_TRUE(supervisor.Run().ok()); });
  AwaitChanges(1);
  pool(0)->healthy = false;
  AwaitChanges(3);  // not serving, then serving on generation 1
  std::function<void()> stale;
  {
    absl::MutexLock lock(&mu_);
    stale = losts_.at(0);
  }
  stale();
  absl::SleepFor(absl::Milliseconds(50));  // 10 health polls
  {
    absl::MutexLock lock(&mu_);
    EXPECT_EQ(serving_, (std::vector<bool>{true, false, true}));
    EXPECT_EQ(generations_, (std::vector<int>{0, 1}));
  }
  supervisor.Stop();
  run.join();
}

TEST_F(PoolSupervisorTest, ServesUntilStoppedThenShutsThePoolDown) {
  PoolSupervisor supervisor(Options(false), Factory(), nullptr,
                            [this](std::shared_ptr<Engine> e) { OnServing(std::move(e)); });
  absl::Status result = absl::UnknownError("not run");
  std::thread run([&] { result = supervisor.Run(); });
  AwaitChanges(1);
  supervisor.Stop();
  run.join();
  EXPECT_TRUE(result.ok()) << result;
  absl::MutexLock lock(&mu_);
  EXPECT_EQ(serving_, (std::vector<bool>{true, false}));
  EXPECT_EQ(generations_, (std::vector<int>{0}));
}

TEST_F(PoolSupervisorTest, ALostPoolIsReplacedByANewGeneration) {
  PoolSupervisor supervisor(Options(false), Factory({1}), nullptr,
                            [this](std::shared_ptr<Engine> e) { OnServing(std::move(e)); });
  std::thread run([&] { EXPECT_TRUE(supervisor.Run().ok()); });
  AwaitChanges(1);
  pool(0)->healthy = false;
  AwaitChanges(3);  // not serving, then serving on generation 2 (1 failed to start)
  EXPECT_TRUE(pool(0)->shut_down);
  supervisor.Stop();
  run.join();
  absl::MutexLock lock(&mu_);
  EXPECT_EQ(serving_, (std::vector<bool>{true, false, true, false}));
  EXPECT_EQ(generations_, (std::vector<int>{0, 1, 2}));
}

TEST_F(PoolSupervisorTest, ExitOnPoolFailureReturnsTheFailure) {
  PoolSupervisor supervisor(Options(true), Factory(), nullptr,
                            [this](std::shared_ptr<Engine> e) { OnServing(std::move(e)); });
  absl::Status result;
  std::thread run([&] { result = supervisor.Run(); });
  AwaitChanges(1);
  pool(0)->healthy = false;
  run.join();
  EXPECT_EQ(result.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(pool(0)->shut_down);
  absl::MutexLock lock(&mu_);
  EXPECT_EQ(serving_, (std::vector<bool>{true, false}));
}

TEST_F(PoolSupervisorTest, AFirstStartThatFailsIsReturned) {
  PoolSupervisor supervisor(Options(false), Factory({0}), nullptr,
                            [this](std::shared_ptr<Engine> e) { OnServing(std::move(e)); });
  const absl::Status result = supervisor.Run();
  EXPECT_EQ(result.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(result.message(), "rank 0 did not attach");
  absl::MutexLock lock(&mu_);
  EXPECT_TRUE(serving_.empty());
}

}  // namespace
}  // namespace tpserve
