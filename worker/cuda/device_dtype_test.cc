#include "worker/cuda/device_dtype.h"

#include <cuda_bf16.h>

#include <string>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

TEST(DeviceDTypeTest, SizesMatchTheCudaTypes) {
  static_assert(DeviceDTypeSize(DeviceDType::kFloat32) == sizeof(float));
  static_assert(DeviceDTypeSize(DeviceDType::kBFloat16) == sizeof(__nv_bfloat16));
  EXPECT_EQ(std::string(DeviceDTypeName(DeviceDType::kFloat32)), "fp32");
  EXPECT_EQ(std::string(DeviceDTypeName(DeviceDType::kBFloat16)), "bf16");
}

}  // namespace
}  // namespace tpserve
