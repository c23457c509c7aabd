// Each rank is a process: the tests below re-execute this binary once per rank, with
// the scenario in the environment, running only GlooRank.Main. Processes (not threads)
// because that is how Gloo ranks are deployed, and so that a rank can die for real.
#include "worker/comm/gloo_comm_group.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "rendezvous/store_server.h"
#include "rendezvous/tcp_store.h"

extern char** environ;

namespace tpserve {
namespace {

constexpr char kScenarioEnv[] = "TPSERVE_GLOO_TEST_SCENARIO";
constexpr char kRankEnv[] = "TPSERVE_GLOO_TEST_RANK";
constexpr char kSizeEnv[] = "TPSERVE_GLOO_TEST_SIZE";
constexpr char kPortEnv[] = "TPSERVE_GLOO_TEST_PORT";
// Incremented in the store by each rank process as it starts.
constexpr char kStartedKey[] = "ranks_started";
// The collective timeout of the failure scenarios.
constexpr absl::Duration kShortTimeout = absl::Seconds(2);

// ---- What each rank process runs -------------------------------------------------

void CheckAllReduce(CommGroup& comm) {
  const int r = comm.rank(), t = comm.size();
  std::vector<float> small(7);
  for (int i = 0; i < 7; ++i) small[i] = static_cast<float>((r + 1) * (i + 1));
  ASSERT_TRUE(comm.AllReduceSum(absl::MakeSpan(small)).ok());
  for (int i = 0; i < 7; ++i) EXPECT_EQ(small[i], (i + 1) * t * (t + 1) / 2) << i;

  // Integers below 2^24 sum exactly in fp32, whatever the reduction order.
  std::vector<float> large(1 << 20);
  for (size_t i = 0; i < large.size(); ++i) large[i] = static_cast<float>(i % 1024 + r);
  ASSERT_TRUE(comm.AllReduceSum(absl::MakeSpan(large)).ok());
  size_t wrong = 0;
  for (size_t i = 0; i < large.size(); ++i) {
    wrong += large[i] != static_cast<float>(t * (i % 1024) + t * (t - 1) / 2);
  }
  EXPECT_EQ(wrong, 0u);
}

void CheckAllGather(CommGroup& comm, size_t n) {
  const int r = comm.rank(), t = comm.size();
  std::vector<float> in(n), out(n * t, -1.0f);
  for (size_t i = 0; i < n; ++i) in[i] = static_cast<float>(r * 100000 + i % 50000);
  ASSERT_TRUE(comm.AllGather(in, absl::MakeSpan(out)).ok());
  size_t wrong = 0;
  for (int src = 0; src < t; ++src) {
    for (size_t i = 0; i < n; ++i) {
      wrong += out[src * n + i] != static_cast<float>(src * 100000 + i % 50000);
    }
  }
  EXPECT_EQ(wrong, 0u) << "n=" << n;
}

void CheckBroadcast(CommGroup& comm, size_t n, int root) {
  std::vector<uint8_t> data(n, 0xEE);
  if (comm.rank() == root) {
    for (size_t i = 0; i < n; ++i) data[i] = static_cast<uint8_t>(root * 31 + i);
  }
  ASSERT_TRUE(comm.Broadcast(absl::MakeSpan(data), root).ok());
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) wrong += data[i] != static_cast<uint8_t>(root * 31 + i);
  EXPECT_EQ(wrong, 0u) << "n=" << n << " root=" << root;
}

// Mixed small collectives, each checked, as a decode loop would issue them.
void CheckManyInARow(CommGroup& comm, int iterations) {
  const int r = comm.rank(), t = comm.size();
  for (int it = 0; it < iterations && !::testing::Test::HasFailure(); ++it) {
    switch (it % 4) {
      case 0: {
        std::vector<float> v(16, static_cast<float>(it + r));
        ASSERT_TRUE(comm.AllReduceSum(absl::MakeSpan(v)).ok()) << it;
        EXPECT_EQ(v[15], static_cast<float>(t * it + t * (t - 1) / 2)) << it;
        break;
      }
      case 1:
        CheckAllGather(comm, 3);
        break;
      case 2:
        CheckBroadcast(comm, 8, it % t);
        break;
      case 3:
        ASSERT_TRUE(comm.Barrier().ok()) << it;
        break;
    }
  }
}

// Fractions, so that the order of the sum shows in the bits: every transport sums in
// rank order (the TCP ring aside, which only tcp-only groups use past
// gather_reduce_max_floats).
void CheckAllReduceBits(CommGroup& comm, size_t n) {
  const int r = comm.rank(), t = comm.size();
  auto value = [](int rank, size_t i) {
    return static_cast<float>(rank * 7919 + i) / 13.0f + 1e-3f * static_cast<float>(rank);
  };
  std::vector<float> data(n);
  for (size_t i = 0; i < n; ++i) data[i] = value(r, i);
  ASSERT_TRUE(comm.AllReduceSum(absl::MakeSpan(data)).ok());
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) {
    float want = value(0, i);
    for (int src = 1; src < t; ++src) want += value(src, i);
    wrong += data[i] != want;
  }
  EXPECT_EQ(wrong, 0u) << "n=" << n;
}

// Ranks on several hosts, a payload past gather_reduce_max_floats: each host's ranks
// summed in rank order, then the hosts' sums in host order; the same bits on every rank.
void CheckAllReduceBitsByHost(GlooCommGroup& comm, size_t n) {
  auto value = [](int rank, size_t i) {
    return static_cast<float>(rank * 7919 + i) / 13.0f + 1e-3f * static_cast<float>(rank);
  };
  std::vector<float> data(n);
  for (size_t i = 0; i < n; ++i) data[i] = value(comm.rank(), i);
  ASSERT_TRUE(comm.AllReduceSum(absl::MakeSpan(data)).ok());
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) {
    float want = 0;
    for (size_t h = 0; h < comm.hosts().size(); ++h) {
      const std::vector<int>& ranks = comm.hosts()[h];
      float host = value(ranks[0], i);
      for (size_t j = 1; j < ranks.size(); ++j) host += value(ranks[j], i);
      want = h == 0 ? host : want + host;
    }
    wrong += data[i] != want;
  }
  EXPECT_EQ(wrong, 0u) << "n=" << n;
}

// `ring`: large all-reduces do not sum in rank order (Gloo's ring, or a sum per host).
void RunCollectives(CommGroup& comm, bool ring) {
  CheckAllReduceBits(comm, 1000);
  if (!ring) CheckAllReduceBits(comm, 700001);  // past a slot: in pieces
  CheckAllReduce(comm);
  CheckAllGather(comm, 5);
  CheckAllGather(comm, 1 << 18);
  CheckAllGather(comm, 300001);  // past a 1 MiB shared-memory slot: in pieces
  for (int root = 0; root < comm.size(); ++root) CheckBroadcast(comm, 1000, root);
  CheckBroadcast(comm, 4 << 20, comm.size() - 1);
  EXPECT_TRUE(comm.Barrier().ok());
  // Caller errors are reported without breaking the group.
  std::vector<float> in(2), wrong_out(2 * comm.size() + 1);
  std::vector<uint8_t> bytes(4);
  EXPECT_EQ(comm.AllGather(in, absl::MakeSpan(wrong_out)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comm.Broadcast(absl::MakeSpan(bytes), comm.size()).code(),
            absl::StatusCode::kInvalidArgument);
  CheckManyInARow(comm, 400);
}

// Ranks other than `victim` run an all-reduce that must fail fast; the victim exits
// right after joining (`hang` false) or sleeps past the timeout (`hang` true).
void RunPeerFailure(CommGroup& comm, int victim, bool hang) {
  if (comm.rank() == victim) {
    if (hang) absl::SleepFor(2 * kShortTimeout);
    _exit(0);
  }
  std::vector<float> data(1 << 16, 1.0f);
  const absl::Time start = absl::Now();
  const absl::Status status = comm.AllReduceSum(absl::MakeSpan(data));
  const absl::Duration elapsed = absl::Now() - start;
  std::fprintf(stderr, "rank %d: all-reduce with %s peer returned after %s: %s\n",
               comm.rank(), hang ? "a hung" : "an exited",
               absl::FormatDuration(elapsed).c_str(), status.ToString().c_str());
  EXPECT_FALSE(status.ok());
  EXPECT_LT(elapsed, kShortTimeout + absl::Seconds(1));
  EXPECT_EQ(comm.Barrier().code(), absl::StatusCode::kFailedPrecondition);
}

int EnvInt(const char* name) {
  int value = -1;
  const char* text = std::getenv(name);
  EXPECT_TRUE(text != nullptr && absl::SimpleAtoi(text, &value)) << name;
  return value;
}

TEST(GlooRank, Main) {
  const char* scenario_env = std::getenv(kScenarioEnv);
  if (scenario_env == nullptr) GTEST_SKIP() << "runs only as a rank started by the tests";
  std::string scenario = scenario_env;
  GlooOptions options;
  // "..._tcp": the same scenario with every collective on Gloo's TCP transport;
  // "..._hosts": with the ranks standing on two hosts, alternately (0, 2, ... on one;
  // 1, 3, ... on the other).
  const bool tcp_only = absl::EndsWith(scenario, "_tcp");
  const bool two_hosts = absl::EndsWith(scenario, "_hosts");
  options.rank = EnvInt(kRankEnv);
  options.size = EnvInt(kSizeEnv);
  if (tcp_only) {
    options.shared_memory = false;
    scenario.resize(scenario.size() - 4);
  }
  if (two_hosts) {
    options.host_id = absl::StrCat("host ", options.rank % 2);
    scenario.resize(scenario.size() - 6);
  }
  options.store_port = EnvInt(kPortEnv);
  // Tells the parent this process really ran as a rank (a skip would also exit 0).
  absl::StatusOr<std::unique_ptr<TcpStoreClient>> store =
      TcpStoreClient::Connect("127.0.0.1", options.store_port, absl::Seconds(5));
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->Add(kStartedKey, 1).ok());
  options.prefix = absl::StrCat("test/", scenario_env, "/", options.size);
  options.connect_timeout = absl::Seconds(15);
  if (scenario != "collectives") options.timeout = kShortTimeout;
  absl::StatusOr<std::unique_ptr<GlooCommGroup>> comm = GlooCommGroup::Create(options);
  ASSERT_TRUE(comm.ok()) << comm.status();
  ASSERT_EQ((*comm)->rank(), options.rank);
  ASSERT_EQ((*comm)->size(), options.size);
  // One host: shared memory unless turned off. Two: within each host of two or more
  // ranks (size 2: two hosts of one rank, so TCP only).
  ASSERT_EQ((*comm)->uses_shared_memory(), options.size > (two_hosts ? 2 : 1) && !tcp_only)
      << (*comm)->TransportText();
  if (two_hosts && options.size > 2) {
    CheckAllReduceBitsByHost(**comm, 700001);
    EXPECT_EQ((*comm)->hosts().size(), 2u);
    EXPECT_NE((*comm)->TransportText().find("shared memory within hosts {0,2"),
              std::string::npos) << (*comm)->TransportText();
  }
  if (scenario == "collectives") {
    RunCollectives(**comm, /*ring=*/tcp_only || two_hosts);
  } else {
    RunPeerFailure(**comm, options.size - 1, /*hang=*/scenario == "peer_hangs");
  }
}

// ---- The tests: start a store, then one process per rank -------------------------

// Runs GlooRank.Main as `size` processes; returns each one's exit code (-1 if it was
// killed by a signal or had to be killed after `limit`).
std::vector<int> RunRanks(const std::string& scenario, int size, int port,
                          absl::Duration limit) {
  std::vector<std::string> base_env;
  for (char** e = environ; *e != nullptr; ++e) {
    // The children must not write the parent's test.xml or shard files.
    if (absl::StartsWith(*e, "XML_OUTPUT_FILE=") || absl::StartsWith(*e, "GTEST_") ||
        absl::StartsWith(*e, "TEST_PREMATURE_EXIT_FILE=") || absl::StartsWith(*e, "TEST_SHARD")) {
      continue;
    }
    base_env.push_back(*e);
  }
  std::string self = "/proc/self/exe", filter = "--gtest_filter=GlooRank.Main";
  std::vector<pid_t> pids;
  for (int rank = 0; rank < size; ++rank) {
    std::vector<std::string> env = base_env;
    env.push_back(absl::StrCat(kScenarioEnv, "=", scenario));
    env.push_back(absl::StrCat(kRankEnv, "=", rank));
    env.push_back(absl::StrCat(kSizeEnv, "=", size));
    env.push_back(absl::StrCat(kPortEnv, "=", port));
    std::vector<char*> envp, argv = {self.data(), filter.data(), nullptr};
    for (std::string& s : env) envp.push_back(s.data());
    envp.push_back(nullptr);
    pid_t pid = -1;
    EXPECT_EQ(posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv.data(), envp.data()), 0);
    pids.push_back(pid);
  }
  std::vector<int> codes(size, -1);
  std::vector<bool> running(size, true);
  const absl::Time deadline = absl::Now() + limit;
  for (int left = size; left > 0;) {
    for (int rank = 0; rank < size; ++rank) {
      int status = 0;
      if (!running[rank] || waitpid(pids[rank], &status, WNOHANG) == 0) continue;
      running[rank] = false;
      --left;
      codes[rank] = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    if (left > 0 && absl::Now() > deadline) {
      for (int rank = 0; rank < size; ++rank) {
        if (running[rank]) kill(pids[rank], SIGKILL);
      }
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  absl::StatusOr<std::unique_ptr<TcpStoreClient>> store =
      TcpStoreClient::Connect("127.0.0.1", port, absl::Seconds(5));
  EXPECT_TRUE(store.ok()) << store.status();
  if (store.ok()) {
    EXPECT_EQ(*(*store)->Add(kStartedKey, 0), size) << "not every process ran as a rank";
  }
  return codes;
}

class GlooCommGroupTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<StoreServer>> server = StoreServer::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }

  std::unique_ptr<StoreServer> server_;
};

TEST_P(GlooCommGroupTest, CollectivesMatchExactly) {
  const int size = GetParam();
  const std::vector<int> codes = RunRanks("collectives", size, server_->port(), absl::Seconds(20));
  for (int rank = 0; rank < size; ++rank) EXPECT_EQ(codes[rank], 0) << "rank " << rank;
}

TEST_P(GlooCommGroupTest, CollectivesMatchExactlyOverTcpOnly) {
  const int size = GetParam();
  const std::vector<int> codes =
      RunRanks("collectives_tcp", size, server_->port(), absl::Seconds(20));
  for (int rank = 0; rank < size; ++rank) EXPECT_EQ(codes[rank], 0) << "rank " << rank;
}

TEST_P(GlooCommGroupTest, CollectivesMatchExactlyAcrossTwoHosts) {
  const int size = GetParam();
  const std::vector<int> codes =
      RunRanks("collectives_hosts", size, server_->port(), absl::Seconds(20));
  for (int rank = 0; rank < size; ++rank) EXPECT_EQ(codes[rank], 0) << "rank " << rank;
}

INSTANTIATE_TEST_SUITE_P(Sizes, GlooCommGroupTest, ::testing::Values(1, 2, 3, 4));

TEST(GlooCommGroupFailureTest, ExitedPeerFailsTheCollectiveFast) {
  absl::StatusOr<std::unique_ptr<StoreServer>> server = StoreServer::Start();
  ASSERT_TRUE(server.ok());
  const std::vector<int> codes =
      RunRanks("peer_exits", 3, (*server)->port(), absl::Seconds(15));
  EXPECT_EQ(codes, std::vector<int>({0, 0, 0}));
}

TEST(GlooCommGroupFailureTest, ExitedPeerFailsTheTcpCollectiveFast) {
  absl::StatusOr<std::unique_ptr<StoreServer>> server = StoreServer::Start();
  ASSERT_TRUE(server.ok());
  const std::vector<int> codes =
      RunRanks("peer_exits_tcp", 3, (*server)->port(), absl::Seconds(15));
  EXPECT_EQ(codes, std::vector<int>({0, 0, 0}));
}

// Two hosts of two ranks: the lost rank's host leader notices in shared memory, the other
// host's leader when its TCP exchange breaks, and its member when the leader breaks the
// segment; all within the bound.
TEST(GlooCommGroupFailureTest, ExitedPeerFailsTheCollectiveAcrossHostsFast) {
  absl::StatusOr<std::unique_ptr<StoreServer>> server = StoreServer::Start();
  ASSERT_TRUE(server.ok());
  const std::vector<int> codes =
      RunRanks("peer_exits_hosts", 4, (*server)->port(), absl::Seconds(15));
  EXPECT_EQ(codes, std::vector<int>({0, 0, 0, 0}));
}

TEST(GlooCommGroupFailureTest, HungPeerFailsTheCollectiveAcrossHostsAtTheTimeout) {
  absl::StatusOr<std::unique_ptr<StoreServer>> server = StoreServer::Start();
  ASSERT_TRUE(server.ok());
  const std::vector<int> codes =
      RunRanks("peer_hangs_hosts", 4, (*server)->port(), absl::Seconds(15));
  EXPECT_EQ(codes, std::vector<int>({0, 0, 0, 0}));
}

TEST(GlooCommGroupFailureTest, HungPeerFailsTheCollectiveAtTheTimeout) {
  absl::StatusOr<std::unique_ptr<StoreServer>> server = StoreServer::Start();
  ASSERT_TRUE(server.ok());
  const std::vector<int> codes =
      RunRanks("peer_hangs", 2, (*server)->port(), absl::Seconds(15));
  EXPECT_EQ(codes, std::vector<int>({0, 0}));
}

TEST(GlooCommGroupFailureTest, CreateFailsWhenPeersNeverJoin) {
  absl::StatusOr<std::unique_ptr<StoreServer>> server = StoreServer::Start();
  ASSERT_TRUE(server.ok());
  GlooOptions options;
  options.rank = 0;
  options.size = 2;
  options.store_port = (*server)->port();
  options.prefix = "lonely";
  options.connect_timeout = absl::Milliseconds(500);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<GlooCommGroup>> comm = GlooCommGroup::Create(options);
  EXPECT_FALSE(comm.ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(3)) << comm.status();
}

TEST(GlooCommGroupSizeOneTest, NeedsNoStore) {
  absl::StatusOr<std::unique_ptr<GlooCommGroup>> comm = GlooCommGroup::Create(GlooOptions{});
  ASSERT_TRUE(comm.ok()) << comm.status();
  RunCollectives(**comm, /*ring=*/false);
}

TEST(GlooOptionsTest, RejectsBadRanksAndPorts) {
  GlooOptions options;
  options.size = 2;
  options.rank = 2;
  options.store_port = 1234;
  EXPECT_EQ(options.Validate().code(), absl::StatusCode::kInvalidArgument);
  options.rank = 1;
  options.store_port = 0;
  EXPECT_EQ(options.Validate().code(), absl::StatusCode::kInvalidArgument);
  options.store_port = 1234;
  EXPECT_TRUE(options.Validate().ok());
}

}  // namespace
}  // namespace tpserve
