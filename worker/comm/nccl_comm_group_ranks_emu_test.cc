// NcclCommGroup at more than one rank, which no single GPU can run: on the CPU emulator's
// NCCL (testing/cuda_emu/nccl.cc), each rank a process as in a pool, through the
// real rendezvous (rank 0's id in a StoreServer). The device collectives sum and gather
// across ranks, the host-span API keeps CommGroup's semantics, and a peer that exits or
// never joins fails the others in bounded time with the group's failure contract.
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "rendezvous/store_server.h"
#include "testing/cuda_emu/rank_processes.h"
#include "worker/comm/nccl_comm_group.h"

namespace tpserve {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(20);

// Runs body(rank, group) on `size` ranks: rank 0 starts the store and the children learn
// its port through a pipe (they fork before any thread starts). Returns each rank's
// failure, "" for none; body's own failures are its return value.
std::vector<std::string> OnRanks(
    int size, const std::string& prefix,
    const std::function<std::string(int rank, NcclOptions& options)>& body) {
  emu::RankPipe port;
  return emu::RunRanks(size, [&](int rank) -> std::string {
    std::unique_ptr<StoreServer> server;
    NcclOptions options;
    options.rank = rank;
    options.size = size;
    options.device = rank;
    options.prefix = prefix;
    options.timeout = kTimeout;
    options.connect_timeout = kTimeout;
    if (rank == 0) {
      absl::StatusOr<std::unique_ptr<StoreServer>> started = StoreServer::Start();
      if (!started.ok()) return started.status().ToString();
      server = *std::move(started);
      options.store_port = server->port();
      port.Send(options.store_port, size - 1);
    } else {
      options.store_port = port.Receive();
    }
    return body(rank, options);
  });
}

void ExpectAllPassed(const std::vector<std::string>& failures) {
  for (size_t r = 0; r < failures.size(); ++r) EXPECT_EQ(failures[r], "") << "rank " << r;
}

float Value(int rank, size_t i) { return static_cast<float>((i * 5 + rank * 11) % 61) * 0.5f; }

// Device and host collectives at `size` ranks, each checked against what every rank's
// inputs make; a rank reports the first thing that differs.
std::string CollectivesBody(int rank, NcclOptions& options) {
  absl::StatusOr<std::unique_ptr<NcclCommGroup>> made = NcclCommGroup::CreateWithOwnStream(options);
  if (!made.ok()) return made.status().ToString();
  NcclCommGroup& comm = **made;
  const int size = comm.size();
  int device = -1;
  cudaGetDevice(&device);
  if (device != rank) return absl::StrCat("rank ", rank, " drives device ", device);
  const size_t n = 3000;
  std::vector<float> mine(n), sum(n, 0.0f), gathered;
  for (int r = 0; r < size; ++r) {
    for (size_t i = 0; i < n; ++i) {
      if (r == rank) mine[i] = Value(r, i);
      sum[i] += Value(r, i);
      gathered.push_back(Value(r, i));
    }
  }
  // Device: fp32 and bf16 all-reduce in place, all-gather in place; one wait for all.
  float* f32 = nullptr;
  __nv_bfloat16* bf16 = nullptr;
  float* all = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&f32), n * sizeof(float));
  cudaMalloc(reinterpret_cast<void**>(&bf16), n * sizeof(__nv_bfloat16));
  cudaMalloc(reinterpret_cast<void**>(&all), size * n * sizeof(float));
  std::vector<__nv_bfloat16> mine_bf16(n);
  for (size_t i = 0; i < n; ++i) mine_bf16[i] = __float2bfloat16(mine[i]);
  cudaMemcpy(f32, mine.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemcpy(bf16, mine_bf16.data(), n * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice);
  cudaMemcpy(all + rank * n, mine.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  for (absl::Status s : {comm.AllReduceSumDevice(f32, n, DeviceDType::kFloat32),
                         comm.AllReduceSumDevice(bf16, n, DeviceDType::kBFloat16),
                         comm.AllGatherDevice(all + rank * n, all, n, DeviceDType::kFloat32),
                         comm.WaitStream(kTimeout)}) {
    if (!s.ok()) return s.ToString();
  }
  std::vector<float> got(n), got_all(size * n);
  std::vector<__nv_bfloat16> got_bf16(n);
  cudaMemcpy(got.data(), f32, n * sizeof(float), cudaMemcpyDeviceToHost);
  cudaMemcpy(got_bf16.data(), bf16, n * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost);
  cudaMemcpy(got_all.data(), all, size * n * sizeof(float), cudaMemcpyDeviceToHost);
  cudaFree(f32);
  cudaFree(bf16);
  cudaFree(all);
  if (got != sum) return "fp32 device all-reduce";
  for (size_t i = 0; i < n; ++i) {
    if (__bfloat162float(got_bf16[i]) != __bfloat162float(__float2bfloat16(sum[i]))) {
      return absl::StrCat("bf16 device all-reduce at ", i);
    }
  }
  if (got_all != gathered) return "device all-gather";
  // Host spans: CommGroup's API, unchanged for code written against it.
  CommGroup& group = comm;
  std::vector<float> data = mine;
  if (absl::Status s = group.AllReduceSum(absl::MakeSpan(data)); !s.ok()) return s.ToString();
  if (data != sum) return "host all-reduce";
  std::vector<float> out(size * n, -1.0f);
  if (absl::Status s = group.AllGather(mine, absl::MakeSpan(out)); !s.ok()) return s.ToString();
  if (out != gathered) return "host all-gather";
  std::vector<uint8_t> bytes(777, static_cast<uint8_t>(rank));
  if (absl::Status s = group.Broadcast(absl::MakeSpan(bytes), size - 1); !s.ok()) {
    return s.ToString();
  }
  if (bytes != std::vector<uint8_t>(777, static_cast<uint8_t>(size - 1))) return "broadcast";
  if (absl::Status s = group.Barrier(); !s.ok()) return s.ToString();
  return "";
}

TEST(NcclCommGroupRanksTest, CollectivesAtTwoRanks) {
  ExpectAllPassed(OnRanks(2, "test/two/", CollectivesBody));
}

TEST(NcclCommGroupRanksTest, CollectivesAtThreeRanks) {
  ExpectAllPassed(OnRanks(3, "test/three/", CollectivesBody));
}

TEST(NcclCommGroupRanksTest, PeerThatExitsBreaksTheGroupWithoutAHang) {
  ExpectAllPassed(OnRanks(2, "test/exit/", [](int rank, NcclOptions& options) -> std::string {
    absl::StatusOr<std::unique_ptr<NcclCommGroup>> made =
        NcclCommGroup::CreateWithOwnStream(options);
    if (!made.ok()) return made.status().ToString();
    if (rank == 1) _exit(0);  // a worker that dies between steps
    NcclCommGroup& comm = **made;
    float* x = nullptr;
    cudaMalloc(reinterpret_cast<void**>(&x), sizeof(float));
    const absl::Time start = absl::Now();
    absl::Status s = comm.AllReduceSumDevice(x, 1, DeviceDType::kFloat32);
    if (s.ok()) s = comm.WaitStream(kTimeout);
    const absl::Duration took = absl::Now() - start;
    std::fprintf(stderr, "rank 0 failed after %s: %s\n", absl::FormatDuration(took).c_str(),
                 s.ToString().c_str());
    std::string failure;
    if (s.code() != absl::StatusCode::kInternal || !absl::StrContains(s.message(), "exited") ||
        !absl::StartsWith(s.message(), "rank 0 of 2: ")) {
      failure = "want INTERNAL naming the rank and the exit, got " + s.ToString();
    } else if (took > absl::Seconds(5)) {
      failure = "detecting the exit took " + absl::FormatDuration(took);
    }
    const absl::Status later = comm.Barrier();
    if (later.code() != absl::StatusCode::kFailedPrecondition) {
      failure = "a later call on the broken group: " + later.ToString();
    }
    cudaFree(x);
    const absl::Time destroy = absl::Now();
    made->reset();
    if (absl::Now() - destroy > absl::Seconds(2)) failure = "the broken group's destructor hung";
    return failure;
  }));
}

TEST(NcclCommGroupRanksTest, RankZeroAloneIsDeadlineExceeded) {
  ExpectAllPassed(OnRanks(1, "test/alone/", [](int, NcclOptions& options) -> std::string {
    options.size = 2;  // rank 1 never comes
    options.connect_timeout = absl::Milliseconds(500);
    const absl::Time start = absl::Now();
    absl::StatusOr<std::unique_ptr<NcclCommGroup>> made =
        NcclCommGroup::CreateWithOwnStream(options);
    const absl::Duration took = absl::Now() - start;
    if (made.ok()) return "a group of two with one rank";
    if (made.status().code() != absl::StatusCode::kDeadlineExceeded ||
        !absl::StrContains(made.status().message(), "are all 2 ranks up?")) {
      return made.status().ToString();
    }
    if (took > absl::Seconds(2)) return "took " + absl::FormatDuration(took);
    return "";
  }));
}

}  // namespace
}  // namespace tpserve
