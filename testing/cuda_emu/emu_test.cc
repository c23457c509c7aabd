// The emulator's own contract (emu.h) on small kernels: indices, barriers, shuffles,
// deferred cp.async, launch checks, graph capture, and the misuses it must catch.
#include "testing/cuda_emu/emu.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

template <typename T>
T* DeviceArray(size_t n) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, n * sizeof(T)), cudaSuccess);
  return static_cast<T*>(p);
}

template <typename T>
std::vector<T> ToHost(const T* device, size_t n) {
  std::vector<T> host(n);
  EXPECT_EQ(cudaMemcpy(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

__global__ void WriteIndices(int64_t* out) {
  const int64_t block = blockIdx.x + gridDim.x * (blockIdx.y + int64_t{gridDim.y} * blockIdx.z);
  const int64_t threads = int64_t{blockDim.x} * blockDim.y * blockDim.z;
  const int64_t thread = threadIdx.x + blockDim.x * (threadIdx.y + int64_t{blockDim.y} * threadIdx.z);
  out[block * threads + thread] = block * threads + thread;
}

TEST(EmuTest, EveryThreadOfEveryCtaRunsWithItsIndices) {
  const size_t n = 12 * 64;
  int64_t* out = DeviceArray<int64_t>(n);
  emu::Launch(WriteIndices, dim3(3, 2, 2), dim3(4, 8, 2), 0, nullptr, out);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const std::vector<int64_t> got = ToHost(out, n);
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(got[i], static_cast<int64_t>(i));
  cudaFree(out);
}

// out[t] = what thread t reads from the slot its neighbour t + 1 wrote.
__global__ void ReadNeighbour(bool sync, float* out) {
  float* slots = reinterpret_cast<float*>(emu::DynamicSmem());
  const int t = threadIdx.x, n = blockDim.x;
  slots[t] = static_cast<float>(t);
  if (sync) __syncthreads();
  out[blockIdx.x * n + t] = slots[(t + 1) % n];
}

TEST(EmuTest, SyncThreadsOrdersSharedMemoryAndItsAbsenceShows) {
  constexpr int kThreads = 128;
  float* out = DeviceArray<float>(2 * kThreads);
  for (const bool sync : {true, false}) {
    emu::Launch(ReadNeighbour, 2, kThreads, kThreads * sizeof(float), nullptr, sync, out);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    int stale = 0;
    for (const float v : ToHost(out, 2 * kThreads)) stale += std::isnan(v);
    // Without the barrier, a thread reads the poison (NaN) where its neighbour has not
    // run yet: all but the last thread of the CTA run in ascending order, the last one
    // of the CTA run in descending order.
    EXPECT_EQ(stale, sync ? 0 : kThreads) << "sync " << sync;
  }
  cudaFree(out);
}

// out[block] = the sum of the block's thread indices, through one slot per warp.
__global__ void SumThroughStaticShared(int* out) {
  __shared__ int per_warp[4];
  if (threadIdx.x % 32 == 0) per_warp[threadIdx.x / 32] = 0;
  __syncthreads();
  for (unsigned lane = 0; lane < 32; ++lane) {
    if (threadIdx.x % 32 == lane) per_warp[threadIdx.x / 32] += threadIdx.x;
    __syncwarp();
  }
  __syncthreads();
  if (threadIdx.x == 0) out[blockIdx.x] = per_warp[0] + per_warp[1] + per_warp[2] + per_warp[3];
}

TEST(EmuTest, StaticSharedMemoryIsSharedByTheCta) {
  int* out = DeviceArray<int>(3);
  emu::Launch(SumThroughStaticShared, 3, 128, 0, nullptr, out);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  for (const int sum : ToHost(out, 3)) EXPECT_EQ(sum, 127 * 128 / 2);
  cudaFree(out);
}

// Each CTA reads its static shared word before writing it, and again after a barrier.
__global__ void ReadsStaticSharedFirst(uint32_t* before, uint32_t* after) {
  __shared__ uint32_t word;
  emu::PoisonStaticShared(&word, sizeof(word));
  if (threadIdx.x == 0) before[blockIdx.x] = word;
  __syncthreads();
  if (threadIdx.x == 1) word = blockIdx.x;  // a later thread writes: no re-poisoning
  __syncthreads();
  if (threadIdx.x == 0) after[blockIdx.x] = word;
}

TEST(EmuTest, StaticSharedMemoryIsPoisonedForEachCta) {
  uint32_t* before = DeviceArray<uint32_t>(3);
  uint32_t* after = DeviceArray<uint32_t>(3);
  emu::Launch(ReadsStaticSharedFirst, 3, 64, 0, nullptr, before, after);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  // Not 0 (a fresh static) nor the previous CTA's value.
  EXPECT_EQ(ToHost(before, 3), std::vector<uint32_t>(3, 0xFFFFFFFFu));
  EXPECT_EQ(ToHost(after, 3), (std::vector<uint32_t>{0, 1, 2}));
  cudaFree(before), cudaFree(after);
}

__global__ void Shuffles(float* sums, double* doubles, int64_t* ints) {
  const int lane = threadIdx.x % 32;
  float v = static_cast<float>(lane);
  for (int m = 16; m > 0; m /= 2) v += __shfl_xor_sync(0xffffffffu, v, m);
  sums[threadIdx.x] = v;
  doubles[threadIdx.x] = __shfl_sync(0xffffffffu, 0.5 * lane, 5);
  ints[threadIdx.x] = __shfl_sync(0xffffffffu, int64_t{1} << (lane + 20), 31 - lane);
}

TEST(EmuTest, ShufflesExchangeWithinEachWarp) {
  constexpr int kThreads = 64;
  float* sums = DeviceArray<float>(kThreads);
  double* doubles = DeviceArray<double>(kThreads);
  int64_t* ints = DeviceArray<int64_t>(kThreads);
  emu::Launch(Shuffles, 1, kThreads, 0, nullptr, sums, doubles, ints);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const std::vector<float> s = ToHost(sums, kThreads);
  const std::vector<double> d = ToHost(doubles, kThreads);
  const std::vector<int64_t> i = ToHost(ints, kThreads);
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(s[t], 496.0f);  // 0 + 1 + ... + 31
    EXPECT_EQ(d[t], 2.5);
    EXPECT_EQ(i[t], int64_t{1} << (31 - t % 32 + 20));
  }
  cudaFree(sums), cudaFree(doubles), cudaFree(ints);
}

// Per thread: its warp's ballot of lanes % 3 == 0, its lane's __shfl_up_sync by one, and
// the CTA's count and maximum of thread indices, through shared atomics.
__global__ void VotesAndAtomics(unsigned* votes, int* up, unsigned* count, int* max) {
  __shared__ unsigned cta_count;
  __shared__ int cta_max;
  const int lane = threadIdx.x % 32;
  if (threadIdx.x == 0) cta_count = 0, cta_max = -1;
  __syncthreads();
  votes[threadIdx.x] = __ballot_sync(0xffffffffu, lane % 3 == 0);
  up[threadIdx.x] = __shfl_up_sync(0xffffffffu, lane, 1);
  atomicAdd(&cta_count, 1u);
  atomicMax(&cta_max, static_cast<int>(threadIdx.x));
  __syncthreads();
  count[threadIdx.x] = cta_count;
  max[threadIdx.x] = cta_max;
}

TEST(EmuTest, BallotsShuffleUpAndAtomicsSeeTheirWarpAndCta) {
  constexpr int kThreads = 48;  // a full warp and one of 16 lanes
  unsigned* votes = DeviceArray<unsigned>(kThreads);
  int* up = DeviceArray<int>(kThreads);
  unsigned* count = DeviceArray<unsigned>(kThreads);
  int* max = DeviceArray<int>(kThreads);
  emu::Launch(VotesAndAtomics, 1, kThreads, 0, nullptr, votes, up, count, max);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const std::vector<unsigned> v = ToHost(votes, kThreads), c = ToHost(count, kThreads);
  const std::vector<int> u = ToHost(up, kThreads), m = ToHost(max, kThreads);
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(v[t], t < 32 ? 0x49249249u : 0x9249u) << t;  // lanes 0, 3, 6, ... of the warp
    EXPECT_EQ(u[t], t % 32 == 0 ? 0 : t % 32 - 1) << t;
    EXPECT_EQ(c[t], static_cast<unsigned>(kThreads));
    EXPECT_EQ(m[t], kThreads - 1);
  }
  cudaFree(votes), cudaFree(up), cudaFree(count), cudaFree(max);
}

TEST(EmuTest, FloatToUnsignedRoundsToEvenAndSaturatesAsADeviceDoes) {
  EXPECT_EQ(__float2ull_rn(2.5f), 2u);
  EXPECT_EQ(__float2ull_rn(3.5f), 4u);
  EXPECT_EQ(__float2ull_rn(-7.0f), 0u);
  EXPECT_EQ(__float2ull_rn(NAN), 1ull << 63);
  EXPECT_EQ(__float2ull_rn(0x1p70f), ~0ull);
}

// out[0..3] = shared memory before the wait, out[4..7] after: one copied chunk (valid) or
// zeros (not).
__global__ void CopyOneChunk(const uint32_t* src, bool valid, uint32_t* out) {
  uint32_t* chunk = reinterpret_cast<uint32_t*>(emu::DynamicSmem());
  emu::CopyAsync16(chunk, src, valid);
  emu::CommitCopies();
  for (int i = 0; i < 4; ++i) out[i] = chunk[i];
  emu::WaitCopies(0);
  for (int i = 0; i < 4; ++i) out[4 + i] = chunk[i];
}

TEST(EmuTest, AsyncCopiesLandWhenTheirGroupIsWaitedFor) {
  const std::vector<uint32_t> host = {1, 2, 3, 4};
  uint32_t* src = DeviceArray<uint32_t>(4);
  uint32_t* out = DeviceArray<uint32_t>(8);
  cudaMemcpy(src, host.data(), 16, cudaMemcpyHostToDevice);
  for (const bool valid : {true, false}) {
    emu::Launch(CopyOneChunk, 1, 1, 16, nullptr, src, valid, out);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    const std::vector<uint32_t> got = ToHost(out, 8);
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(got[i], 0xFFFFFFFFu) << "landed before the wait";
      EXPECT_EQ(got[4 + i], valid ? host[i] : 0u);
    }
  }
  cudaFree(src), cudaFree(out);
}

__global__ void Nothing() {}

TEST(EmuTest, LaunchesCheckTheConfigurationAndSharedMemoryLimit) {
  emu::Launch(Nothing, dim3(1, 70000), 32, 0, nullptr);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  emu::Launch(Nothing, 1, 1025, 0, nullptr);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  emu::Launch(Nothing, 1, 32, 64 << 10, nullptr);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue) << "64 KiB without the attribute";
  EXPECT_EQ(cudaFuncSetAttribute(Nothing, cudaFuncAttributeMaxDynamicSharedMemorySize, 228 << 10),
            cudaErrorInvalidValue);
  cudaGetLastError();
  ASSERT_EQ(cudaFuncSetAttribute(Nothing, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 << 10),
            cudaSuccess);
  emu::Launch(Nothing, 1, 32, 64 << 10, nullptr);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

__global__ void AddTo(const float* in, float add, float* out) { out[threadIdx.x] = in[threadIdx.x] + add; }

TEST(EmuTest, GraphsReplayCapturedLaunchesOnTodaysData) {
  float* in = DeviceArray<float>(32);
  float* out = DeviceArray<float>(32);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  emu::Launch(AddTo, 1, 32, 0, stream, in, 0.5, out);  // the double converts to float
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  cudaGraph_t graph;
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  EXPECT_TRUE(std::isnan(ToHost(out, 32)[0])) << "a captured launch ran at the capture";
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (const float v : {1.0f, 2.0f}) {
    const std::vector<float> host(32, v);
    cudaMemcpy(in, host.data(), 32 * sizeof(float), cudaMemcpyHostToDevice);
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    EXPECT_EQ(ToHost(out, 32)[31], v + 0.5f);
  }
  cudaGraphExecDestroy(exec), cudaGraphDestroy(graph), cudaStreamDestroy(stream);
  cudaFree(in), cudaFree(out);
}

TEST(EmuTest, AllocatingDuringACaptureInvalidatesIt) {
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 64), cudaErrorStreamCaptureUnsupported);
  cudaGraph_t graph;
  EXPECT_EQ(cudaStreamEndCapture(stream, &graph), cudaErrorStreamCaptureInvalidated);
  cudaGetLastError();
  cudaStreamDestroy(stream);
}

__global__ void HalfTheCtaSyncs() {
  if (threadIdx.x < 64) __syncthreads();
}

__global__ void NeverWaits(const uint4* src) {
  emu::CopyAsync16(emu::DynamicSmem(), src, true);
  emu::CommitCopies();
}

__global__ void CopiesPastTheEnd(const uint4* src) {
  emu::CopyAsync16(emu::DynamicSmem() + 16, src, true);
}

__global__ void WritesPastTheEnd() { emu::DynamicSmem()[4096 + threadIdx.x] = 0; }

__global__ void WritesBefore(float* p) { p[-1] = 0.0f; }

__global__ void ReadsPast(const float* p, float* out) { out[0] = p[64]; }

// A 16-byte load from 8 bytes into an allocation, as a misindexed uint4 load would be.
__global__ void LoadsMisaligned(const float* p, float* out) {
  emu::CheckAligned(p, 16, "load");
  emu::CheckAligned(p + 2, 16, "load");
  out[0] = p[2];
}

TEST(EmuDeathTest, MisusesAbortWithTheReason) {
  uint4* src = DeviceArray<uint4>(1);
  EXPECT_DEATH(emu::Launch(HalfTheCtaSyncs, 1, 128, 0, nullptr),
               "deadlock .* 64 wait at __syncthreads.* 64 exited");
  EXPECT_DEATH(emu::Launch(NeverWaits, 1, 32, 16, nullptr, src), "never waited for");
  EXPECT_DEATH(emu::Launch(CopiesPastTheEnd, 1, 1, 16, nullptr, src), "dynamic shared memory");
  EXPECT_DEATH(emu::Launch(WritesPastTheEnd, 1, 1, 4096, nullptr), "");
  float* device = DeviceArray<float>(64);
  EXPECT_DEATH(emu::Launch(WritesBefore, 1, 1, 0, nullptr, device),
               "wrote 4 bytes before the device allocation of 256 bytes");
  EXPECT_DEATH(emu::Launch(ReadsPast, 1, 1, 0, nullptr, device, device), "");
  EXPECT_DEATH(emu::Launch(LoadsMisaligned, 2, 1, 0, nullptr, device, device),
               "thread 0 of CTA \\(0, 0, 0\\): 16-byte load at 0x[0-9a-f]+: misaligned address");
  cudaFree(src), cudaFree(device);
}

}  // namespace
}  // namespace tpserve
