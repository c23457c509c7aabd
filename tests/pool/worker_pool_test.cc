// WorkerPool with real tpserve_worker processes (tp 2, Gloo) on the llama_gqa fixture:
// greedy generation through RunStep matches transformers; a SIGKILLed rank fails the
// pool fast and leaves no process behind; a SIGSTOPped one fails its step at the step
// deadline; the ranks get the worker token outside their argv and environment; a
// worker that cannot load fails Start with the cause; Shutdown is idempotent; the next
// generation starts after a failure.
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
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

// tpserve_worker (CPU only) or tpserve_worker_cuda.
std::string WorkerBinary(const std::string& name = "tpserve_worker") {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  return absl::StrCat(srcdir ? srcdir : ".", "/tpserve/worker/rank/", name);
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
  // A CUDA pool sized by a fraction of each GPU, on tpserve_worker.
  WorkerPoolOptions CudaOptions() const {
    WorkerPoolOptions o = Options();
    o.device = "cuda";
    o.dtype = "bfloat16";
    o.kv_num_blocks = 0;
    o.kv_memory_bytes = 0;
    o.kv_memory_fraction = 0.5;
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
  EXPECT_LT(failed_step_took, absl::Seconds(1));  // the closed stream, not the teardown
  EXPECT_FALSE((*pool)->healthy());
  EXPECT_FALSE((*pool)->failure().ok());
  worker::v1::StepPlan next;
  next.set_step(5);
  EXPECT_EQ((*pool)->RunStep(next).status().code(), absl::StatusCode::kUnavailable);
  (*pool)->Shutdown("after failure");  // waits for the teardown
  EXPECT_TRUE(NoChildrenLeft());
  for (int64_t pid : pids) EXPECT_TRUE(ProcessGone(pid)) << pid;

  auto next_pool = WorkerPool::Start(Options(/*generation=*/1));
  ASSERT_TRUE(next_pool.ok()) << next_pool.status();
  ExpectGreedyMatches(**next_pool);
}

constexpr absl::Duration kStepTimeout = absl::Seconds(1);
// How late past its deadline a failed step may return: scheduling, not teardown.
constexpr absl::Duration kLateness = absl::Milliseconds(250);

// A pool with a 1 s step deadline whose first spawned rank (or, with `all`, every
// rank) is then SIGSTOPped; its ranks' pids. stop_grace stays the server's default
// (1 s): the teardown that follows is not the step's to wait for. `lost_at` is when
// on_failure ran.
std::vector<int64_t> StopRanks(absl::StatusOr<std::unique_ptr<WorkerPool>>& pool,
                               WorkerPoolOptions o, absl::Mutex* mu, absl::Time* lost_at,
                               bool all = false) {
  o.step_timeout = kStepTimeout;
  o.on_failure = [mu, lost_at](const absl::Status&) {
    absl::MutexLock lock(mu);
    *lost_at = absl::Now();
  };
  pool = WorkerPool::Start(o);
  if (!pool.ok()) return {};
  const std::vector<int64_t> pids = (*pool)->worker_pids();
  for (size_t i = 0; i < (all ? pids.size() : 1); ++i) kill(static_cast<pid_t>(pids[i]), SIGSTOP);
  return pids;
}

// Shuts the failed pool down, within its teardown's bound, and expects nothing left.
void ExpectTornDown(WorkerPool& pool, const std::vector<int64_t>& pids) {
  const absl::Time start = absl::Now();
  pool.Shutdown("test done");
  EXPECT_LT(absl::Now() - start, absl::Seconds(4));
  EXPECT_TRUE(NoChildrenLeft());
  for (int64_t pid : pids) EXPECT_TRUE(ProcessGone(pid)) << pid;
}

// The step fails at its deadline, not after the hung rank's teardown (Shutdown, a
// grace, SIGTERM, another grace: seconds), and the pool reports itself lost at once.
TEST_F(WorkerPoolTest, HungWorkerFailsItsStepAtTheDeadline) {
  absl::StatusOr<std::unique_ptr<WorkerPool>> pool;
  absl::Mutex mu;
  absl::Time lost_at = absl::InfiniteFuture();
  const std::vector<int64_t> pids = StopRanks(pool, Options(), &mu, &lost_at);
  ASSERT_TRUE(pool.ok()) << pool.status();
  worker::v1::StepPlan plan;
  plan.set_step(1);
  const absl::Time start = absl::Now();
  absl::StatusOr<worker::v1::StepResult> result = (*pool)->RunStep(plan);
  const absl::Duration took = absl::Now() - start;
  EXPECT_FALSE((*pool)->healthy());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable) << result.status();
  EXPECT_NE(result.status().message().find("did not answer step 1"), std::string::npos)
      << result.status();
  EXPECT_GE(took, kStepTimeout);
  EXPECT_LT(took, kStepTimeout + kLateness);
  {
    absl::MutexLock lock(&mu);
    mu.AwaitWithTimeout(absl::Condition(
                            +[](absl::Time* t) { return *t != absl::InfiniteFuture(); }, &lost_at),
                        absl::Seconds(2));
    EXPECT_LT(lost_at - start, kStepTimeout + kLateness);
  }
  ExpectTornDown(**pool, pids);
}

// The deadline follows the step's work: a step computing N tokens is waited for
// step_timeout + N × step_timeout_per_token (a long prefill on a slow machine is no
// hang), and a hung rank is still caught right then.
TEST_F(WorkerPoolTest, TheStepDeadlineGrowsWithTheTokensItComputes) {
  absl::StatusOr<std::unique_ptr<WorkerPool>> pool;
  absl::Mutex mu;
  absl::Time lost_at = absl::InfiniteFuture();
  WorkerPoolOptions o = Options();
  o.step_timeout_per_token = absl::Milliseconds(1);
  // Every rank stopped: a running one would refuse this bare plan at once.
  const std::vector<int64_t> pids = StopRanks(pool, o, &mu, &lost_at, /*all=*/true);
  ASSERT_TRUE(pool.ok()) << pool.status();
  worker::v1::StepPlan plan;
  plan.set_step(1);
  plan.add_new_sequences()->set_num_new_tokens(600);
  plan.add_running()->set_num_new_tokens(400);
  const absl::Duration allowed = kStepTimeout + absl::Milliseconds(1000);
  const absl::Time start = absl::Now();
  absl::StatusOr<worker::v1::StepResult> result = (*pool)->RunStep(plan);
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable) << result.status();
  EXPECT_NE(result.status().message().find("within 2s"), std::string::npos) << result.status();
  EXPECT_GE(took, allowed);
  EXPECT_LT(took, allowed + kLateness);
  ExpectTornDown(**pool, pids);
}

// Ranks that stop reading while a plan bigger than a stream's flow-control window is
// sent (every rank, so the first write blocks whatever the rank order): the write
// blocks, and the step deadline must still end the step (it counts from the sending),
// the teardown must not wait on that write, and no process is left.
TEST_F(WorkerPoolTest, RankThatStopsReadingMidPlanFailsTheStepInTime) {
  absl::StatusOr<std::unique_ptr<WorkerPool>> pool;
  absl::Mutex mu;
  absl::Time lost_at;
  const std::vector<int64_t> pids = StopRanks(pool, Options(), &mu, &lost_at, /*all=*/true);
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
  EXPECT_NE(result.status().message().find("stopped reading"), std::string::npos)
      << result.status();
  EXPECT_GE(took, kStepTimeout);
  EXPECT_LT(took, kStepTimeout + kLateness) << result.status();
  ExpectTornDown(**pool, pids);
}

// The token reaches each spawned rank through a pipe it inherits and closes: neither its
// command line nor its environment carries it.
TEST_F(WorkerPoolTest, SpawnedRanksGetTheTokenOutsideArgvAndEnvironment) {
  WorkerPoolOptions options = Options();
  options.worker_threads = 2;
  auto pool = WorkerPool::Start(options);
  ASSERT_TRUE(pool.ok()) << pool.status();
  auto read = [](const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  for (int64_t pid : (*pool)->worker_pids()) {
    const std::vector<std::string> argv =
        absl::StrSplit(read(absl::StrCat("/proc/", pid, "/cmdline")), '\0', absl::SkipEmpty());
    ASSERT_EQ(argv.size(), 9u) << absl::StrJoin(argv, " ");
    EXPECT_EQ(argv[1], "--frontend");
    EXPECT_EQ(argv[3], "--log-level");  // the server's
    EXPECT_EQ(argv[4], "info");
    EXPECT_EQ(argv[5], "--threads");  // the server's --cpu-threads-per-rank, resolved
    EXPECT_EQ(argv[6], "2");
    EXPECT_EQ(argv[7], "--worker-token-fd");
    // The parent's environment, but for what a worker on a CPU OpenBLAS does not know
    // sets for itself before running itself again (worker/kernels/cpu/openblas_core.h).
    auto environment = [&](const std::string& path) {
      std::vector<std::string> entries = absl::StrSplit(read(path), '\0');
      entries.erase(std::remove_if(entries.begin(), entries.end(),
                                   [](const std::string& e) {
                                     return absl::StartsWith(e, "OPENBLAS_CORETYPE=") ||
                                            absl::StartsWith(e, "TPSERVE_OPENBLAS_REPLACED_CORE=");
                                   }),
                    entries.end());
      return entries;
    };
    EXPECT_EQ(environment(absl::StrCat("/proc/", pid, "/environ")),
              environment("/proc/self/environ"));
    // Read and closed at start: the number names no pipe any more.
    char target[256] = {};
    const ssize_t length = readlink(absl::StrCat("/proc/", pid, "/fd/", argv[8]).c_str(), target,
                                    sizeof(target) - 1);  // -1: no such descriptor now
    EXPECT_TRUE(length < 0 || !absl::StartsWith(absl::string_view(target, length), "pipe:"))
        << target;
  }
  (*pool)->Shutdown("test done");
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
  o.dtype = "float16";  // neither backend computes in it
  EXPECT_EQ(WorkerPool::Start(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = Options();
  o.device = "cuda";
  o.kv_num_blocks = 0;
  o.kv_memory_bytes = 0;
  o.kv_memory_fraction = 0;  // no way to size the cache
  EXPECT_EQ(WorkerPool::Start(o).status().code(), absl::StatusCode::kInvalidArgument);
  // An advertised store host: one host, not a wildcard, and only for ranks on TCP.
  for (const char* host : {"0.0.0.0", "::", "leader:7000", "a/b", "two words", "-"}) {
    o = Options();
    o.control_address = "10.0.0.1:7000";
    o.advertise_host = host;
    if (std::string(host) == "-") o.advertise_host = std::string(254, 'a');
    auto bad = WorkerPool::Start(o);
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << host;
    EXPECT_NE(bad.status().message().find("--advertise-address"), std::string::npos)
        << bad.status();
  }
  o = Options();  // its control address is a Unix socket
  o.advertise_host = "leader.example";
  EXPECT_NE(WorkerPool::Start(o).status().message().find("give a HOST:PORT --control-address"),
            std::string::npos);
  EXPECT_TRUE(NoChildrenLeft());
}

// Without a GPU, a CUDA pool's workers report that they have no device; the start fails
// with that cause and leaves no process behind.
TEST_F(WorkerPoolTest, CudaPoolWithoutAGpuFailsStartWithTheCause) {
  if (CudaDeviceAvailable().ok()) GTEST_SKIP() << "a GPU is present";
  WorkerPoolOptions o = CudaOptions();
  o.worker_binary = WorkerBinary("tpserve_worker_cuda");
  auto pool = WorkerPool::Start(o);
  ASSERT_FALSE(pool.ok());
  EXPECT_NE(pool.status().message().find("CUDA"), std::string::npos) << pool.status();
  EXPECT_TRUE(NoChildrenLeft());
}

// The CPU-only worker links no CUDA library: asked for a CUDA pool, its ranks refuse the
// assignment and name the binary that would serve it; nothing is left behind.
TEST_F(WorkerPoolTest, CpuOnlyWorkerRefusesACudaPoolByName) {
  auto pool = WorkerPool::Start(CudaOptions());
  ASSERT_FALSE(pool.ok());
  EXPECT_NE(pool.status().message().find("tpserve_worker_cuda"), std::string::npos)
      << pool.status();
  EXPECT_TRUE(NoChildrenLeft());
}

}  // namespace
}  // namespace tpserve
