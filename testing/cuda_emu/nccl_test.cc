// The emulated NCCL (nccl.cc): communicators of one and of several ranks, each rank a
// process (forked here, after the id is made and before any thread starts), collectives
// checked against sums computed here, captures replayed, and each way a peer can fail
// (exit, abort, never arrive) failing the waiting rank in bounded time instead of a hang.
#include <nccl.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "testing/cuda_emu/emu.h"
#include "testing/cuda_emu/rank_processes.h"

namespace tpserve {
namespace {

using Clock = std::chrono::steady_clock;
using emu::RunRanks;

void ExpectAllPassed(const std::vector<std::string>& failures) {
  for (size_t r = 0; r < failures.size(); ++r) EXPECT_EQ(failures[r], "") << "rank " << r;
}

ncclUniqueId NewId() {
  ncclUniqueId id;
  EXPECT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  return id;
}

// A non-blocking init polled to completion, as NcclCommGroup does; null on failure.
ncclComm_t Join(const ncclUniqueId& id, int nranks, int rank, ncclResult_t* state) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  *state = ncclCommInitRankConfig(&comm, nranks, id, rank, &config);
  if (*state != ncclInProgress || comm == nullptr) return nullptr;
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (Clock::now() < deadline) {
    if (ncclCommGetAsyncError(comm, state) != ncclSuccess) return nullptr;
    if (*state != ncclInProgress) return *state == ncclSuccess ? comm : nullptr;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return nullptr;
}

template <typename T>
T* DeviceCopy(const std::vector<T>& host) {
  void* p = nullptr;
  if (cudaMalloc(&p, std::max<size_t>(host.size(), 1) * sizeof(T)) != cudaSuccess) return nullptr;
  cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  return static_cast<T*>(p);
}

template <typename T>
std::vector<T> HostCopy(const T* device, size_t n) {
  std::vector<T> host(n);
  cudaMemcpy(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost);
  return host;
}

// Multiples of 1/4 below 26: exact in bf16, so the sums' one rounding is all there is.
float Value(int rank, size_t i) { return static_cast<float>((i * 7 + rank * 13) % 101) * 0.25f; }

// bf16 bits of f, rounded to nearest even (f is finite here).
uint16_t Bf16Bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

TEST(EmuNcclTest, NonBlockingInitOfOneRankCompletesWhenPolled) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ASSERT_EQ(ncclCommInitRankConfig(&comm, 1, NewId(), 0, &config), ncclInProgress);
  ASSERT_NE(comm, nullptr);
  ncclResult_t state = ncclInternalError;
  ASSERT_EQ(ncclCommGetAsyncError(comm, &state), ncclSuccess);
  EXPECT_EQ(state, ncclSuccess);
  EXPECT_EQ(ncclCommFinalize(comm), ncclInProgress);
  ASSERT_EQ(ncclCommGetAsyncError(comm, &state), ncclSuccess);
  EXPECT_EQ(state, ncclInProgress);
  ASSERT_EQ(ncclCommGetAsyncError(comm, &state), ncclSuccess);
  EXPECT_EQ(state, ncclSuccess);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

TEST(EmuNcclTest, InitRefusesWhatNcclRefuses) {
  const ncclUniqueId id = NewId();
  ncclComm_t comm = nullptr;
  EXPECT_EQ(ncclCommInitRankConfig(&comm, 9, id, 0, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclCommInitRankConfig(&comm, 2, id, 2, nullptr), ncclInvalidArgument);
  ncclUniqueId made_up;
  std::memset(&made_up, 0, sizeof(made_up));
  std::strcpy(made_up.internal, "not-an-id");
  EXPECT_EQ(ncclCommInitRankConfig(&comm, 1, made_up, 0, nullptr), ncclInvalidArgument);
  EXPECT_EQ(comm, nullptr);
  // Rank 0 of 2 joins and waits; a second rank 0, and a rank that counts 3, are refused.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t first = nullptr;
  ASSERT_EQ(ncclCommInitRankConfig(&first, 2, id, 0, &config), ncclInProgress);
  ncclResult_t state;
  ASSERT_EQ(ncclCommGetAsyncError(first, &state), ncclSuccess);
  EXPECT_EQ(state, ncclInProgress) << "one of two ranks cannot complete the init";
  EXPECT_EQ(ncclCommInitRankConfig(&comm, 2, id, 0, &config), ncclInvalidUsage);
  EXPECT_EQ(ncclCommInitRankConfig(&comm, 3, id, 1, &config), ncclInvalidUsage);
  EXPECT_EQ(comm, nullptr);
  float* data = DeviceCopy(std::vector<float>{1});
  EXPECT_EQ(ncclAllReduce(data, data, 1, ncclFloat32, ncclSum, first, nullptr), ncclInvalidUsage)
      << "a collective before the init completed";
  EXPECT_EQ(ncclCommAbort(first), ncclSuccess);
  cudaFree(data);
}

TEST(EmuNcclTest, OneRankCollectivesCopyAndAreCaptured) {
  ncclResult_t state;
  ncclComm_t comm = Join(NewId(), 1, 0, &state);
  ASSERT_NE(comm, nullptr) << state;
  const std::vector<float> values = {1, 2, 3};
  float* in = DeviceCopy(values);
  float* out = DeviceCopy(std::vector<float>(3, -1));
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_EQ(ncclAllGather(in, out, 3, ncclFloat32, comm, stream), ncclSuccess);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  EXPECT_EQ(HostCopy(out, 3), std::vector<float>(3, -1)) << "a capture ran the collective";
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  EXPECT_EQ(HostCopy(out, 3), values);
  // A host buffer is refused, as NCCL's pointer check does, and so is a root past the end.
  EXPECT_EQ(ncclAllReduce(values.data(), out, 3, ncclFloat32, ncclSum, comm, stream),
            ncclInvalidArgument);
  EXPECT_EQ(ncclBroadcast(in, out, 3, ncclFloat32, 1, comm, stream), ncclInvalidArgument);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  cudaFree(in);
  cudaFree(out);
  EXPECT_EQ(ncclCommAbort(comm), ncclSuccess);
}

// Each collective of the comm group at `nranks`, with sizes that take one and several
// chunks of the transport, in place and not.
std::string CollectivesBody(const ncclUniqueId& id, int nranks, int rank) {
  ncclResult_t state;
  ncclComm_t comm = Join(id, nranks, rank, &state);
  if (comm == nullptr) return "init: " + std::string(ncclGetErrorString(state));
  std::string failure;
  auto check = [&](bool ok, const std::string& what) {
    if (!ok && failure.empty()) failure = what;
  };
  for (size_t n : {size_t{5}, (size_t{1} << 18) + 3}) {  // 1 MiB of fp32 + 3: two chunks
    const std::string at = " (n=" + std::to_string(n) + ")";
    std::vector<float> mine(n), sum(n, 0.0f), gathered;
    std::vector<uint16_t> mine_bf16(n), sum_bf16(n);
    std::vector<int32_t> mine_int(n), max_int(n, INT32_MIN);
    for (int r = 0; r < nranks; ++r) {
      for (size_t i = 0; i < n; ++i) {
        const float v = Value(r, i);
        if (r == rank) {
          mine[i] = v;
          mine_bf16[i] = Bf16Bits(v);
          mine_int[i] = static_cast<int32_t>(i % 17) * (r + 1) - 40;
        }
        sum[i] += v;
        max_int[i] = std::max(max_int[i], static_cast<int32_t>(i % 17) * (r + 1) - 40);
        gathered.push_back(v);
      }
    }
    for (size_t i = 0; i < n; ++i) sum_bf16[i] = Bf16Bits(sum[i]);

    float* data = DeviceCopy(mine);
    check(ncclAllReduce(data, data, n, ncclFloat32, ncclSum, comm, nullptr) == ncclSuccess,
          "fp32 all-reduce" + at);
    check(HostCopy(data, n) == sum, "fp32 in-place sum" + at);
    uint16_t* bf16 = DeviceCopy(mine_bf16);
    uint16_t* bf16_out = DeviceCopy(std::vector<uint16_t>(n));
    check(ncclAllReduce(bf16, bf16_out, n, ncclBfloat16, ncclSum, comm, nullptr) == ncclSuccess,
          "bf16 all-reduce" + at);
    check(HostCopy(bf16_out, n) == sum_bf16, "bf16 sum" + at);
    check(HostCopy(bf16, n) == mine_bf16, "an out-of-place all-reduce changed its input" + at);
    int32_t* ints = DeviceCopy(mine_int);
    check(ncclAllReduce(ints, ints, n, ncclInt32, ncclMax, comm, nullptr) == ncclSuccess,
          "int32 max" + at);
    check(HostCopy(ints, n) == max_int, "int32 max values" + at);

    float* all = DeviceCopy(std::vector<float>(n * nranks, -1.0f));
    float* in = DeviceCopy(mine);
    check(ncclAllGather(in, all, n, ncclFloat32, comm, nullptr) == ncclSuccess,
          "all-gather" + at);
    check(HostCopy(all, n * nranks) == gathered, "all-gather values" + at);
    float* inplace = DeviceCopy(std::vector<float>(n * nranks, -1.0f));
    cudaMemcpy(inplace + rank * n, mine.data(), n * sizeof(float), cudaMemcpyHostToDevice);
    check(ncclAllGather(inplace + rank * n, inplace, n, ncclFloat32, comm, nullptr) == ncclSuccess,
          "in-place all-gather" + at);
    check(HostCopy(inplace, n * nranks) == gathered, "in-place all-gather values" + at);

    // Broadcast from the last rank; the others' send buffers are not read.
    const int root = nranks - 1;
    float* bcast = DeviceCopy(rank == root ? mine : std::vector<float>(n, -2.0f));
    check(ncclBroadcast(bcast, bcast, n, ncclFloat32, root, comm, nullptr) == ncclSuccess,
          "broadcast" + at);
    check(HostCopy(bcast, n) == std::vector<float>(gathered.begin() + root * n,
                                                   gathered.begin() + (root + 1) * n),
          "broadcast values" + at);
    for (void* p : {static_cast<void*>(data), static_cast<void*>(bf16),
                    static_cast<void*>(bf16_out), static_cast<void*>(ints),
                    static_cast<void*>(all), static_cast<void*>(in), static_cast<void*>(inplace),
                    static_cast<void*>(bcast)}) {
      cudaFree(p);
    }
  }
  // Captured: each replay sums again across the ranks, as a graph's launch does.
  cudaStream_t stream = nullptr;
  cudaStreamCreate(&stream);
  float* x = DeviceCopy(std::vector<float>{static_cast<float>(rank + 1)});
  cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal);
  check(ncclAllReduce(x, x, 1, ncclFloat32, ncclSum, comm, stream) == ncclSuccess, "capture");
  cudaGraph_t graph = nullptr;
  check(cudaStreamEndCapture(stream, &graph) == cudaSuccess, "end capture");
  cudaGraphExec_t exec = nullptr;
  check(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess, "instantiate");
  const float first = nranks * (nranks + 1) / 2.0f;
  for (int replay = 0; replay < 2; ++replay) cudaGraphLaunch(exec, stream);
  check(HostCopy(x, 1) == std::vector<float>{first * nranks}, "two replays");
  ncclCommGetAsyncError(comm, &state);
  check(state == ncclSuccess, "an async error after the collectives");
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  cudaFree(x);
  ncclCommFinalize(comm);
  ncclCommGetAsyncError(comm, &state);
  ncclCommDestroy(comm);
  return failure;
}

TEST(EmuNcclTest, CollectivesAcrossTwoProcesses) {
  const ncclUniqueId id = NewId();
  ExpectAllPassed(RunRanks(2, [&](int rank) { return CollectivesBody(id, 2, rank); }));
}

TEST(EmuNcclTest, CollectivesAcrossThreeProcesses) {
  const ncclUniqueId id = NewId();
  ExpectAllPassed(RunRanks(3, [&](int rank) { return CollectivesBody(id, 3, rank); }));
}

TEST(EmuNcclTest, BlockingInitWaitsForEveryRank) {
  const ncclUniqueId id = NewId();
  ExpectAllPassed(RunRanks(2, [&](int rank) -> std::string {
    if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ncclComm_t comm = nullptr;
    const ncclResult_t result = ncclCommInitRankConfig(&comm, 2, id, rank, nullptr);
    if (result != ncclSuccess) return std::string("init: ") + ncclGetErrorString(result);
    ncclCommDestroy(comm);
    return "";
  }));
}

// Rank 0 waits in an all-reduce that rank 1 will never join, for the reason `peer` acts
// out; it must fail with `want` (the communicator's async error from then on) within
// `bound`, and every later collective must return that error at once.
void ExpectWaitingRankFails(const std::function<void(ncclComm_t)>& peer, ncclResult_t want,
                            std::chrono::milliseconds bound) {
  const ncclUniqueId id = NewId();
  ExpectAllPassed(RunRanks(2, [&](int rank) -> std::string {
    ncclResult_t state;
    ncclComm_t comm = Join(id, 2, rank, &state);
    if (comm == nullptr) return std::string("init: ") + ncclGetErrorString(state);
    if (rank == 1) {
      peer(comm);
      return "";
    }
    float* x = DeviceCopy(std::vector<float>{1});
    const auto start = Clock::now();
    const ncclResult_t enqueued = ncclAllReduce(x, x, 1, ncclFloat32, ncclSum, comm, nullptr);
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    std::string failure;
    if (enqueued != ncclSuccess) failure = "the failure showed at the enqueue, not as async";
    if (ncclCommGetAsyncError(comm, &state) != ncclSuccess || state != want) {
      failure = std::string("async state: ") + ncclGetErrorString(state);
    }
    if (took > bound) failure = "took " + std::to_string(took.count()) + " ms";
    if (ncclAllReduce(x, x, 1, ncclFloat32, ncclSum, comm, nullptr) != want) {
      failure = "a later collective on the broken communicator did not fail";
    }
    std::fprintf(stderr, "rank 0 failed after %lld ms: %s\n", static_cast<long long>(took.count()),
                 ncclGetLastError(comm));
    cudaFree(x);
    ncclCommAbort(comm);
    return failure;
  }));
}

TEST(EmuNcclTest, PeerThatExitsFailsTheWaitingRank) {
  ExpectWaitingRankFails([](ncclComm_t) { _exit(0); }, ncclRemoteError,
                         std::chrono::milliseconds(3000));
}

TEST(EmuNcclTest, PeerThatAbortsFailsTheWaitingRank) {
  ExpectWaitingRankFails(
      [](ncclComm_t comm) {
        ncclCommAbort(comm);
        std::this_thread::sleep_for(std::chrono::seconds(2));  // alive, but gone from NCCL
      },
      ncclRemoteError, std::chrono::milliseconds(3000));
}

TEST(EmuNcclTest, PeerThatNeverArrivesTimesOut) {
  setenv("TPSERVE_EMU_NCCL_TIMEOUT_S", "1", 1);
  ExpectWaitingRankFails(
      [](ncclComm_t) { std::this_thread::sleep_for(std::chrono::milliseconds(2500)); }, ncclSystemError,
      std::chrono::milliseconds(3000));
  unsetenv("TPSERVE_EMU_NCCL_TIMEOUT_S");
}

}  // namespace
}  // namespace tpserve
