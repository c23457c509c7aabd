// The emulated NCCL (nccl.cc) for one rank: the non-blocking init the comm group polls,
// collectives as copies that a capture records, and refusals of what it does not model.
#include <nccl.h>

#include <vector>

#include "gtest/gtest.h"
#include "worker/kernels/cuda/emu/emu.h"

namespace tpserve {
namespace {

ncclComm_t InitNonBlocking(int nranks, ncclResult_t* result) {
  ncclUniqueId id;
  EXPECT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  *result = ncclCommInitRankConfig(&comm, nranks, id, 0, &config);
  return comm;
}

TEST(EmuNcclTest, NonBlockingInitCompletesWhenPolled) {
  ncclResult_t result;
  ncclComm_t comm = InitNonBlocking(1, &result);
  ASSERT_EQ(result, ncclInProgress);
  ASSERT_NE(comm, nullptr);
  ncclResult_t state = ncclInternalError;
  ASSERT_EQ(ncclCommGetAsyncError(comm, &state), ncclSuccess);
  EXPECT_EQ(state, ncclInProgress);
  ASSERT_EQ(ncclCommGetAsyncError(comm, &state), ncclSuccess);
  EXPECT_EQ(state, ncclSuccess);
  EXPECT_EQ(ncclCommFinalize(comm), ncclInProgress);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

TEST(EmuNcclTest, MoreThanOneRankIsRefused) {
  ncclResult_t result;
  EXPECT_EQ(InitNonBlocking(2, &result), nullptr);
  EXPECT_EQ(result, ncclInvalidUsage);
}

TEST(EmuNcclTest, CollectivesCopyAndAreCaptured) {
  ncclResult_t result;
  ncclComm_t comm = InitNonBlocking(1, &result);
  ncclResult_t state;
  ncclCommGetAsyncError(comm, &state);
  float *in = nullptr, *out = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&in), 3 * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&out), 3 * sizeof(float)), cudaSuccess);
  const std::vector<float> values = {1, 2, 3};
  cudaMemcpy(in, values.data(), 3 * sizeof(float), cudaMemcpyHostToDevice);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_EQ(ncclAllGather(in, out, 3, ncclFloat32, comm, stream), ncclSuccess);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  std::vector<float> got(3);
  cudaMemcpy(got.data(), out, 3 * sizeof(float), cudaMemcpyDeviceToHost);
  EXPECT_EQ(got, values);
  // A host buffer is refused, as NCCL's pointer check does.
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

}  // namespace
}  // namespace tpserve
