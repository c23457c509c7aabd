// WorkerPool with real tpserve_worker processes (tp 2, Gloo) on the llama_gqa fixture:
// greedy generation through RunStep matches transformers; a SIGKILLed rank fails the
// pool fast and leaves no process behind; a worker that cannot load fails Start with
// the cause; Shutdown is idempotent; the next generation starts after a failure.
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/pool/worker_pool.h"
#include "tests/golden/golden_fixture.h"
#include "tests/golden/plan_driver.h"
#include "worker/cuda/cuda_status.h"

namespace tpserve {
namespace {

constexpr int kBlockSize = 4;
constexpr int kNumBlocks = 64;

std::string WorkerBinary() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  return absl::StrCat(srcdir ? srcdir : ".", "/tpserve/worker/rank/tpserve_worker");
}

bool NoChildrenLeft() {
  int status = 0;
  return waitpid(-1, &status, WNOHANG) == -1 && errno == ECHILD;
}

bool ProcessGone(int64_t pid) {
  struct stat st;
  return stat(absl::StrCat("/proc/", pid).c_str(), &st) != 0;
}

class WorkerPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Bazel's TEST_TMPDIR can exceed a Unix socket path's 107 characters.
    char dir[] = "/tmp/tpserve_pool_XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    absl::StatusOr<GoldenFixture> f = LoadFixture(FixtureRoot() + "/llama_gqa");
    ASSERT_TRUE(f.ok()) << f.status();
    golden_ = *std::move(f);
  }
  void TearDown() override { rmdir(dir_.c_str()); }

  WorkerPoolOptions Options(int generation = 0) const {
    WorkerPoolOptions o;
    o.model_dir = golden_.dir;
    o.tp = 2;
    o.worker_binary = WorkerBinary();
    o.control_address = absl::StrCat("unix:", dir_, "/control.sock");
    o.generation = generation;
    o.kv_block_size = kBlockSize;
    o.kv_num_blocks = kNumBlocks;
    o.start_timeout = absl::Seconds(20);
    o.step_timeout = absl::Seconds(10);
    return o;
  }

  std::vector<DriverRequest> GreedyRequests() const {
    std::vector<DriverRequest> reqs;
    for (size_t i = 0; i < golden_.greedy.size(); ++i) {
      DriverRequest r;
      r.prompt = golden_.prompts[golden_.greedy[i].prompt_index];
      r.max_new_tokens = static_cast<int>(golden_.greedy[i].output_ids.size());
      r.join_step = 1 + static_cast<int>(i);
      r.chunk = 5;
      reqs.push_back(r);
    }
    return reqs;
  }

  void ExpectGreedyMatches(WorkerPool& pool) {
    auto out = RunGreedy([&](const worker::v1::StepPlan& p) { return pool.RunStep(p); },
                         GreedyRequests(), kBlockSize, kNumBlocks);
    ASSERT_TRUE(out.ok()) << out.status();
    for (size_t i = 0; i < out->size(); ++i) {
      EXPECT_EQ((*out)[i].ids, golden_.greedy[i].output_ids) << "greedy case " << i;
    }
  }

  std::string dir_;
  GoldenFixture golden_;
};

TEST_F(WorkerPoolTest, GreedyThroughSpawnedWorkersMatchesTransformers) {
  auto pool = WorkerPool::Start(Options());
  ASSERT_TRUE(pool.ok()) << pool.status();
  EXPECT_TRUE((*pool)->healthy());
  EXPECT_EQ((*pool)->num_kv_blocks(), kNumBlocks);
  EXPECT_EQ((*pool)->kv_block_size(), kBlockSize);
  ASSERT_EQ((*pool)->worker_pids().size(), 2u);
  ExpectGreedyMatches(**pool);
  // A step number out of sequence is refused without harming the pool.
  worker::v1::StepPlan stale;
  stale.set_step(1);
  EXPECT_EQ((*pool)->RunStep(stale).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE((*pool)->healthy());
  const std::vector<int64_t> pids = (*pool)->worker_pids();
  (*pool)->Shutdown("test done");
  (*pool)->Shutdown("again");  // idempotent
  EXPECT_FALSE((*pool)->healthy());
  EXPECT_EQ((*pool)->RunStep(stale).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(NoChildrenLeft());
  for (int64_t pid : pids) EXPECT_TRUE(ProcessGone(pid)) << pid;
}

TEST_F(WorkerPoolTest, KilledWorkerFailsThePoolAndTheNextGenerationStarts) {
  auto pool = WorkerPool::Start(Options());
  ASSERT_TRUE(pool.ok()) << pool.status();
  const std::vector<int64_t> pids = (*pool)->worker_pids();
  absl::Duration failed_step_took;
  auto step = [&](const worker::v1::StepPlan& p) {
    if (p.step() != 4) return (*pool)->RunStep(p);
    kill(static_cast<pid_t>(pids[1]), SIGKILL);
    const absl::Time start = absl::Now();
    auto r = (*pool)->RunStep(p);
    failed_step_took = absl::Now() - start;
    return r;
  };
  auto out = RunGreedy(step, GreedyRequests(), kBlockSize, kNumBlocks);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kUnavailable) << out.status();
  EXPECT_LT(failed_step_took, absl::Seconds(5));
  EXPECT_FALSE((*pool)->healthy());
  EXPECT_FALSE((*pool)->failure().ok());
  worker::v1::StepPlan next;
  next.set_step(5);
  EXPECT_EQ((*pool)->RunStep(next).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(NoChildrenLeft());
  for (int64_t pid : pids) EXPECT_TRUE(ProcessGone(pid)) << pid;
  (*pool)->Shutdown("after failure");

  auto next_pool = WorkerPool::Start(Options(/*generation=*/1));
  ASSERT_TRUE(next_pool.ok()) << next_pool.status();
  ExpectGreedyMatches(**next_pool);
}

// A pool with a 1 s step deadline whose rank 0 is then SIGSTOPped; its ranks' pids.
std::vector<int64_t> StopRankZero(absl::StatusOr<std::unique_ptr<WorkerPool>>& pool,
                                  WorkerPoolOptions o) {
  o.step_timeout = absl::Seconds(1);
  o.stop_grace = absl::Milliseconds(300);
  pool = WorkerPool::Start(o);
  if (!pool.ok()) return {};
  const std::vector<int64_t> pids = (*pool)->worker_pids();
  kill(static_cast<pid_t>(pids[0]), SIGSTOP);
  return pids;
}

TEST_F(WorkerPoolTest, HungWorkerMissesTheDeadlineAndIsKilled) {
  absl::StatusOr<std::unique_ptr<WorkerPool>> pool;
  const std::vector<int64_t> pids = StopRankZero(pool, Options());
  ASSERT_TRUE(pool.ok()) << pool.status();
  const absl::Time start = absl::Now();
  auto out = RunGreedy([&](const worker::v1::StepPlan& p) { return (*pool)->RunStep(p); },
                       GreedyRequests(), kBlockSize, kNumBlocks);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(out.status().code(), absl::StatusCode::kUnavailable) << out.status();
  EXPECT_NE(out.status().message().find("did not answer step 1"), std::string::npos)
      << out.status();
  EXPECT_TRUE(NoChildrenLeft());
  for (int64_t pid : pids) EXPECT_TRUE(ProcessGone(pid)) << pid;
}

// A rank that stops reading while a plan bigger than its stream's flow-control window is
// sent: the write blocks, and the step deadline must still end the step (it counts from
// the sending), the teardown must not wait on that write, and no process is left.
TEST_F(WorkerPoolTest, RankThatStopsReadingMidPlanFailsTheStepInTime) {
  absl::StatusOr<std::unique_ptr<WorkerPool>> pool;
  const std::vector<int64_t> pids = StopRankZero(pool, Options());
  ASSERT_TRUE(pool.ok()) << pool.status();
  worker::v1::StepPlan plan;
  plan.set_step(1);
  worker::v1::NewSequence* seq = plan.add_new_sequences();
  seq->set_seq_id(1);
  for (int i = 0; i < 4'000'000; ++i) seq->add_token_ids(300);  // ~8 MB on the wire
  const absl::Time start = absl::Now();
  absl::StatusOr<worker::v1::StepResult> result = (*pool)->RunStep(plan);
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable) << result.status();
  EXPECT_LT(took, absl::Seconds(6)) << result.status();
  EXPECT_TRUE(NoChildrenLeft());
  for (int64_t pid : pids) EXPECT_TRUE(ProcessGone(pid)) << pid;
}

TEST_F(WorkerPoolTest, WorkerThatCannotLoadFailsStartWithTheCause) {
  WorkerPoolOptions o = Options();
  o.model_dir = absl::StrCat(dir_, "/no_such_model");
  const absl::Time start = absl::Now();
  auto pool = WorkerPool::Start(o);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  ASSERT_FALSE(pool.ok());
  EXPECT_NE(pool.status().message().find("no_such_model"), std::string::npos) << pool.status();
  EXPECT_NE(pool.status().message().find("worker rank"), std::string::npos) << pool.status();
  EXPECT_TRUE(NoChildrenLeft());
}

TEST_F(WorkerPoolTest, BadOptionsAndMissingBinaryFailStart) {
  WorkerPoolOptions o = Options();
  o.worker_binary = absl::StrCat(dir_, "/no_such_binary");
  auto pool = WorkerPool::Start(o);
  EXPECT_EQ(pool.status().code(), absl::StatusCode::kNotFound) << pool.status();
  o = Options();
  o.control_address = "unix:/" + std::string(200, 'x');
  EXPECT_EQ(WorkerPool::Start(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = Options();
  o.tp = 0;
  EXPECT_EQ(WorkerPool::Start(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = Options();
  o.dtype = "bfloat16";  // cpu computes in float32
  EXPECT_EQ(WorkerPool::Start(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = Options();
  o.device = "cuda";
  o.kv_num_blocks = 0;
  o.kv_memory_bytes = 0;
  o.kv_memory_fraction = 0;  // no way to size the cache
  EXPECT_EQ(WorkerPool::Start(o).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(NoChildrenLeft());
}

// Without a GPU, a CUDA pool's workers report that they have no device; the start fails
// with that cause and leaves no process behind.
TEST_F(WorkerPoolTest, CudaPoolWithoutAGpuFailsStartWithTheCause) {
  if (CudaDeviceAvailable().ok()) GTEST_SKIP() << "a GPU is present";
  WorkerPoolOptions o = Options();
  o.device = "cuda";
  o.dtype = "bfloat16";
  o.kv_num_blocks = 0;
  o.kv_memory_bytes = 0;
  o.kv_memory_fraction = 0.5;
  auto pool = WorkerPool::Start(o);
  ASSERT_FALSE(pool.ok());
  EXPECT_NE(pool.status().message().find("CUDA"), std::string::npos) << pool.status();
  EXPECT_TRUE(NoChildrenLeft());
}

}  // namespace
}  // namespace tpserve
