// DeviceUploader against the host conversion: float and bf16 uploads of many sizes through
// staging chunks far smaller than the arrays (so both buffers are reused many times, and
// several uploads share the stream before one Finish), bit for bit.
#include "worker/cuda/device_uploader.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "worker/cuda/cuda_test_util.h"
#include "worker/cuda/device_buffer.h"
#include "worker/dtype.h"

namespace tpserve {
namespace {

std::vector<float> Values(int64_t n, uint32_t seed) {
  std::vector<float> v = RandomVector(static_cast<size_t>(n), seed, 3.0f);
  if (n > 3) {
    v[0] = std::numeric_limits<float>::quiet_NaN();
    v[1] = -std::numeric_limits<float>::infinity();
    v[2] = 1.0f + std::ldexp(1.0f, -8);  // a tie: rounds to even
  }
  return v;
}

TEST(DeviceUploaderTest, UploadsFloatAndBf16ThroughSmallChunks) {
  TPSERVE_SKIP_WITHOUT_CUDA();
  absl::StatusOr<std::unique_ptr<DeviceUploader>> up = DeviceUploader::Create(64);  // 16 floats
  ASSERT_TRUE(up.ok()) << up.status();
  const int64_t sizes[] = {1, 15, 16, 17, 32, 33, 100, 1000, 4099};
  std::vector<std::vector<float>> host;
  std::vector<DeviceBuffer> f32, bf16;
  for (int64_t n : sizes) {
    host.push_back(Values(n, static_cast<uint32_t>(n)));
    absl::StatusOr<DeviceBuffer> a = DeviceBuffer::Create(n * 4), b = DeviceBuffer::Create(n * 2);
    ASSERT_TRUE(a.ok() && b.ok());
    // Every upload is enqueued before any is waited for.
    ASSERT_TRUE((*up)->Upload(host.back().data(), n, DeviceDType::kFloat32, a->data()).ok());
    ASSERT_TRUE((*up)->Upload(host.back().data(), n, DeviceDType::kBFloat16, b->data()).ok());
    f32.push_back(*std::move(a));
    bf16.push_back(*std::move(b));
  }
  ASSERT_TRUE((*up)->Finish().ok());
  for (size_t i = 0; i < host.size(); ++i) {
    const size_t n = host[i].size();
    std::vector<uint32_t> got32(n), want32(n);
    std::vector<uint16_t> got16(n), want16(n);
    ASSERT_TRUE(f32[i].CopyToHost(got32.data(), n * 4).ok());
    ASSERT_TRUE(bf16[i].CopyToHost(got16.data(), n * 2).ok());
    std::memcpy(want32.data(), host[i].data(), n * 4);
    FloatsToBf16(host[i].data(), n, want16.data());
    EXPECT_EQ(got32, want32) << n << " floats";
    EXPECT_EQ(got16, want16) << n << " bf16";
  }
}

TEST(DeviceUploaderTest, RefusesBadChunksAndPointers) {
  EXPECT_EQ(DeviceUploader::Create(6).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DeviceUploader::Create(0).status().code(), absl::StatusCode::kInvalidArgument);
  TPSERVE_SKIP_WITHOUT_CUDA();
  absl::StatusOr<std::unique_ptr<DeviceUploader>> up = DeviceUploader::Create();
  ASSERT_TRUE(up.ok()) << up.status();
  float x = 1.0f;
  EXPECT_EQ((*up)->Upload(&x, 1, DeviceDType::kFloat32, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*up)->Upload(nullptr, 1, DeviceDType::kFloat32, &x).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*up)->Upload(&x, -1, DeviceDType::kFloat32, &x).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE((*up)->Upload(nullptr, 0, DeviceDType::kBFloat16, nullptr).ok());
  EXPECT_TRUE((*up)->Finish().ok());
}

}  // namespace
}  // namespace tpserve
