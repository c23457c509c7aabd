#include "worker/cuda/device_buffer.h"

#include <vector>

#include "gtest/gtest.h"
#include "worker/cuda/cuda_test_util.h"

namespace tpserve {
namespace {

TEST(DeviceBufferTest, RoundTripsBytes) {
  TPSERVE_SKIP_WITHOUT_CUDA();
  absl::StatusOr<DeviceBuffer> buf = DeviceBuffer::Create(1000);
  ASSERT_TRUE(buf.ok()) << buf.status();
  std::vector<uint8_t> in(1000), out(1000);
  for (int i = 0; i < 1000; ++i) in[i] = static_cast<uint8_t>(i * 7);
  ASSERT_TRUE(buf->CopyFromHost(in.data(), 1000).ok());
  ASSERT_TRUE(buf->CopyToHost(out.data(), 1000).ok());
  EXPECT_EQ(in, out);
  ASSERT_TRUE(buf->Fill(3).ok());
  ASSERT_TRUE(buf->CopyToHost(out.data(), 10, 990).ok());
  EXPECT_EQ(out[0], 3);
}

TEST(DeviceBufferTest, OutOfRangeCopiesAreRefused) {
  TPSERVE_SKIP_WITHOUT_CUDA();
  absl::StatusOr<DeviceBuffer> buf = DeviceBuffer::Create(16);
  ASSERT_TRUE(buf.ok());
  std::vector<uint8_t> host(32);
  EXPECT_EQ(buf->CopyFromHost(host.data(), 17).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(buf->CopyToHost(host.data(), 8, 9).code(), absl::StatusCode::kOutOfRange);
}

TEST(DeviceBufferTest, HugeAllocationIsResourceExhaustedAndLeavesTheDeviceUsable) {
  TPSERVE_SKIP_WITHOUT_CUDA();
  absl::StatusOr<DeviceBuffer> huge = DeviceBuffer::Create(size_t{1} << 50);
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted) << huge.status();
  absl::StatusOr<DeviceBuffer> small = DeviceBuffer::Create(64);
  EXPECT_TRUE(small.ok()) << small.status();
}

TEST(DeviceBufferTest, MoveTransfersOwnership) {
  TPSERVE_SKIP_WITHOUT_CUDA();
  absl::StatusOr<DeviceBuffer> a = DeviceBuffer::Create(64);
  ASSERT_TRUE(a.ok());
  void* p = a->data();
  DeviceBuffer b = *std::move(a);
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(b.bytes(), 64u);
}

}  // namespace
}  // namespace tpserve
