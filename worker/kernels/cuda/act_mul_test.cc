// act·mul on the GPU against the CPU reference, for every activation in both dtypes, with
// guard regions around the output. Tagged "gpu"; skips when no CUDA device is present.
#include "worker/kernels/cuda/act_mul.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "worker/cuda/cuda_test_util.h"
#include "worker/kernels/cpu/norm_activation.h"

namespace tpserve {
namespace {

template <typename T>
class ActMulCudaTest : public ::testing::Test {};
using KernelTypes = ::testing::Types<float, __nv_bfloat16>;
TYPED_TEST_SUITE(ActMulCudaTest, KernelTypes);

TYPED_TEST(ActMulCudaTest, MatchesCpuReference) {
  using T = TypeParam;
  TPSERVE_SKIP_WITHOUT_CUDA();
  // Vector and scalar paths (width % (16 / sizeof(T))), one column, and more columns than
  // a block covers.
  const std::pair<int64_t, int64_t> shapes[] = {{1, 1},    {2, 4},    {5, 8},    {3, 16},
                                                {4, 48},   {7, 129},  {1, 3001}, {333, 1024},
                                                {9, 4096}, {2, 14336}};
  uint32_t seed = 1;
  for (Activation act :
       {Activation::kSilu, Activation::kGelu, Activation::kGeluTanh, Activation::kRelu}) {
    for (auto [n, width] : shapes) {
      const auto gate_up = RoundTo<T>(RandomVector(n * 2 * width, seed++, 3.0f));
      std::vector<float> want(n * width);
      ActMul(act, gate_up.data(), n, width, want.data());

      const DeviceArray<T> d_gate_up(gate_up);
      GuardedOutput<T> out(n * width);
      TPSERVE_ASSERT_CUDA(LaunchActMul(act, d_gate_up.get(), n, width, out.get(), nullptr));
      TPSERVE_ASSERT_CUDA(cudaDeviceSynchronize());
      EXPECT_LT(RelativeError(out.ToHostCheckingGuards(), want), KernelTolerance<T>())
          << static_cast<int>(act) << ": " << n << "x" << width;
    }
  }
}

// Size checks happen before any CUDA call, so this runs without a device too.
TEST(ActMulLaunchTest, RejectsNegativeSizesAndLaunchesNothingWhenEmpty) {
  float* none = nullptr;
  EXPECT_EQ(LaunchActMul<float>(Activation::kSilu, none, -1, 8, none, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(LaunchActMul<float>(Activation::kSilu, none, 2, -8, none, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(LaunchActMul<float>(Activation::kSilu, none, 0, 8, none, nullptr), cudaSuccess);
  EXPECT_EQ(LaunchActMul<float>(Activation::kSilu, none, 3, 0, none, nullptr), cudaSuccess);
}

}  // namespace
}  // namespace tpserve
