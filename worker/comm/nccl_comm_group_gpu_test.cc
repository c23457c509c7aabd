// NcclCommGroup on a device, at T = 1 (NCCL cannot put two ranks on one GPU): the
// collectives are identities or copies there, which still checks that they run on the
// stream, leave the data bit-exact, write nothing outside their outputs, and that the
// failure contract (break, abort, fail fast, no hang) holds. Skips without a device.
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "rendezvous/store_server.h"
#include "rendezvous/tcp_store.h"
#include "worker/comm/nccl_comm_group.h"
#include "worker/cuda/cuda_test_util.h"

namespace tpserve {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(20);

class NcclCommGroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TPSERVE_SKIP_WITHOUT_CUDA();
    absl::StatusOr<std::unique_ptr<StoreServer>> server = StoreServer::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    TPSERVE_ASSERT_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    options_.store_port = server_->port();
    options_.prefix =
        absl::StrCat("test/", ::testing::UnitTest::GetInstance()->current_test_info()->name(), "/");
    options_.timeout = kTimeout;
    options_.connect_timeout = kTimeout;
    absl::StatusOr<std::unique_ptr<NcclCommGroup>> comm = NcclCommGroup::Create(options_, stream_);
    ASSERT_TRUE(comm.ok()) << comm.status();
    comm_ = std::move(*comm);
  }

  void TearDown() override {
    const absl::Time start = absl::Now();
    comm_.reset();
    EXPECT_LT(absl::Now() - start, kTimeout + absl::Seconds(2)) << "the destructor hung";
    if (stream_ != nullptr) {
      EXPECT_EQ(cudaStreamDestroy(stream_), cudaSuccess);
    }
  }

  std::unique_ptr<StoreServer> server_;
  cudaStream_t stream_ = nullptr;
  NcclOptions options_;
  std::unique_ptr<NcclCommGroup> comm_;
};

TEST_F(NcclCommGroupTest, CreateSetsTheDeviceAndPublishesTheId) {
  int device = -1;
  TPSERVE_ASSERT_CUDA(cudaGetDevice(&device));
  EXPECT_EQ(device, options_.device);
  EXPECT_EQ(comm_->rank(), 0);
  EXPECT_EQ(comm_->size(), 1);
  absl::StatusOr<std::unique_ptr<TcpStoreClient>> store =
      TcpStoreClient::Connect("127.0.0.1", server_->port(), absl::Seconds(5));
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<std::string> id =
      (*store)->Get(options_.prefix + kNcclUniqueIdKey, absl::Seconds(1));
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->size(), sizeof(ncclUniqueId::internal));
}

template <typename T>
void CheckAllReduceIsIdentity(NcclCommGroup& comm, DeviceDType dtype, size_t n) {
  const std::vector<float> want = RoundTo<T>(RandomVector(n, /*seed=*/static_cast<uint32_t>(n)));
  GuardedOutput<T> data(n);
  std::vector<T> raw(n);
  for (size_t i = 0; i < n; ++i) raw[i] = FromFloat<T>(want[i]);
  TPSERVE_ASSERT_CUDA(cudaMemcpy(data.get(), raw.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  ASSERT_TRUE(comm.AllReduceSumDevice(data.get(), n, dtype).ok());
  ASSERT_TRUE(comm.WaitStream(kTimeout).ok());
  EXPECT_EQ(data.ToHostCheckingGuards(), want) << DeviceDTypeName(dtype) << " n=" << n;
}

TEST_F(NcclCommGroupTest, AllReduceSumDeviceLeavesTheDataUnchanged) {
  for (size_t n : {size_t{1}, size_t{1000}, (size_t{1} << 20) + 3}) {
    CheckAllReduceIsIdentity<float>(*comm_, DeviceDType::kFloat32, n);
    CheckAllReduceIsIdentity<__nv_bfloat16>(*comm_, DeviceDType::kBFloat16, n);
  }
}

template <typename T>
void CheckAllGatherIsACopy(NcclCommGroup& comm, DeviceDType dtype, size_t n) {
  const std::vector<float> want =
      RoundTo<T>(RandomVector(n, /*seed=*/static_cast<uint32_t>(n + 1)));
  DeviceArray<T> in(want);
  GuardedOutput<T> out(n);
  ASSERT_TRUE(comm.AllGatherDevice(in.get(), out.get(), n, dtype).ok());
  ASSERT_TRUE(comm.WaitStream(kTimeout).ok());
  EXPECT_EQ(out.ToHostCheckingGuards(), want) << DeviceDTypeName(dtype) << " n=" << n;
  EXPECT_EQ(in.ToHost(), want) << "the input changed";
}

TEST_F(NcclCommGroupTest, AllGatherDeviceCopiesAtSizeOne) {
  for (size_t n : {size_t{1}, size_t{4097}, size_t{1} << 20}) {
    CheckAllGatherIsACopy<float>(*comm_, DeviceDType::kFloat32, n);
    CheckAllGatherIsACopy<__nv_bfloat16>(*comm_, DeviceDType::kBFloat16, n);
  }
}

TEST_F(NcclCommGroupTest, ManyEnqueuesThenOneWait) {
  const std::vector<float> want = RandomVector(4096, /*seed=*/3);
  DeviceArray<float> data(want);
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(comm_->AllReduceSumDevice(data.get(), want.size(), DeviceDType::kFloat32).ok());
  }
  EXPECT_TRUE(comm_->WaitStream(kTimeout).ok());
  EXPECT_EQ(data.ToHost(), want);
}

TEST_F(NcclCommGroupTest, HostSpanApiMatchesCommGroupSemantics) {
  CommGroup& comm = *comm_;
  // Small, then large (the staging buffers grow), then small again.
  for (size_t n : {size_t{7}, size_t{1} << 20, size_t{3}}) {
    std::vector<float> data = RandomVector(n, static_cast<uint32_t>(n));
    const std::vector<float> want = data;
    ASSERT_TRUE(comm.AllReduceSum(absl::MakeSpan(data)).ok()) << n;
    EXPECT_EQ(data, want) << n;
    std::vector<float> out(n, -1.0f);
    ASSERT_TRUE(comm.AllGather(want, absl::MakeSpan(out)).ok()) << n;
    EXPECT_EQ(out, want) << n;
  }
  std::vector<uint8_t> bytes(1000);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 31);
  const std::vector<uint8_t> sent = bytes;
  ASSERT_TRUE(comm.Broadcast(absl::MakeSpan(bytes), /*root=*/0).ok());
  EXPECT_EQ(bytes, sent);
  EXPECT_TRUE(comm.Barrier().ok());
  EXPECT_TRUE(comm.AllReduceSum({}).ok());
}

TEST_F(NcclCommGroupTest, CallerErrorsLeaveTheGroupUsable) {
  std::vector<float> in(2), wrong_out(3);
  std::vector<uint8_t> bytes(4);
  EXPECT_EQ(comm_->AllGather(in, absl::MakeSpan(wrong_out)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comm_->Broadcast(absl::MakeSpan(bytes), 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comm_->AllReduceSumDevice(nullptr, 8, DeviceDType::kFloat32).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comm_->AllGatherDevice(nullptr, nullptr, 8, DeviceDType::kBFloat16).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comm_->WaitStream(absl::ZeroDuration()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(comm_->Barrier().ok());
}

// Stands in for a collective whose peer never arrives: it holds the stream.
void CUDART_CB SleepOnTheStream(void* ms) {
  absl::SleepFor(absl::Milliseconds(*static_cast<int*>(ms)));
}

TEST_F(NcclCommGroupTest, StuckStreamBreaksTheGroupAndLaterCallsFailFast) {
  // Nothing of NCCL's is queued behind the blocker: the abort must not race a kernel
  // that has yet to start.
  static int hold_ms = 2000;
  TPSERVE_ASSERT_CUDA(cudaLaunchHostFunc(stream_, SleepOnTheStream, &hold_ms));
  const absl::Time start = absl::Now();
  const absl::Status s = comm_->WaitStream(absl::Milliseconds(200));
  const absl::Duration elapsed = absl::Now() - start;
  // Detection is at 200 ms; the abort may then wait for the device (it frees memory).
  std::fprintf(stderr, "WaitStream(200ms) on a stuck stream returned after %s: %s\n",
               absl::FormatDuration(elapsed).c_str(), s.ToString().c_str());
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_TRUE(absl::StartsWith(s.message(), "rank 0 of 1: WaitStream")) << s;
  EXPECT_GE(elapsed, absl::Milliseconds(200));
  EXPECT_LT(elapsed, absl::Milliseconds(hold_ms) + absl::Seconds(1)) << s;
  DeviceArray<float> data(16);
  for (const absl::Status& later :
       {comm_->AllReduceSumDevice(data.get(), 16, DeviceDType::kFloat32), comm_->Barrier(),
        comm_->WaitStream(kTimeout)}) {
    EXPECT_EQ(later.code(), absl::StatusCode::kFailedPrecondition) << later;
    EXPECT_TRUE(absl::StrContains(later.message(), "did not finish within")) << later;
  }
  // TearDown checks that the broken group's destructor returns at once.
}

TEST(NcclCommGroupOwnStreamTest, RunsCollectivesOnTheStreamItMadeAndFreesIt) {
  TPSERVE_SKIP_WITHOUT_CUDA();
  absl::StatusOr<std::unique_ptr<StoreServer>> server = StoreServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  NcclOptions options;
  options.store_port = (*server)->port();
  options.prefix = "test/own_stream/";
  absl::StatusOr<std::unique_ptr<NcclCommGroup>> comm = NcclCommGroup::CreateWithOwnStream(options);
  ASSERT_TRUE(comm.ok()) << comm.status();
  ASSERT_NE((*comm)->stream(), nullptr);
  CheckAllReduceIsIdentity<float>(**comm, DeviceDType::kFloat32, 4099);
  const absl::Time start = absl::Now();
  comm->reset();
  EXPECT_LT(absl::Now() - start, kTimeout) << "the destructor hung";
}

TEST(NcclCommGroupRendezvousTest, RankOneWithoutRankZeroIsDeadlineExceeded) {
  TPSERVE_SKIP_WITHOUT_CUDA();
  absl::StatusOr<std::unique_ptr<StoreServer>> server = StoreServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  NcclOptions options;
  options.rank = 1;
  options.size = 2;
  options.store_port = (*server)->port();
  options.prefix = "test/lonely/";
  options.connect_timeout = absl::Milliseconds(500);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<NcclCommGroup>> comm = NcclCommGroup::Create(options, nullptr);
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kDeadlineExceeded) << comm.status();
  EXPECT_TRUE(absl::StartsWith(comm.status().message(), "rank 1 of 2: ")) << comm.status();
  EXPECT_LT(absl::Now() - start, options.connect_timeout + absl::Seconds(2));
}

}  // namespace
}  // namespace tpserve
