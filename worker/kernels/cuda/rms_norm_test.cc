// RMSNorm and the fused residual add on the GPU against the CPU references, in both
// dtypes, with guard regions around every output (the residual is one too).
// Tagged "gpu"; skips when no CUDA device is present.
#include "worker/kernels/cuda/rms_norm.h"

#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/cuda/cuda_test_util.h"
#include "worker/kernels/cpu/norm_activation.h"

namespace tpserve {
namespace {

constexpr float kEps = 1e-6f;

struct Shape {
  int64_t n, dim;
};
// Vector and scalar paths (dim % (16 / sizeof(T))), rows shorter than a warp, and rows
// longer than a block's width for both dtypes (the strided loop).
constexpr Shape kShapes[] = {{1, 1},   {1, 4},    {5, 8},      {2, 16},   {3, 48},
                             {7, 129}, {2, 3001}, {333, 4096}, {4, 8192}, {3, 16392}};

template <typename T>
void CheckRmsNorm(const Shape& s, bool in_place, uint32_t seed) {
  const auto x = RoundTo<T>(RandomVector(s.n * s.dim, seed, 2.0f));
  const auto weight = RoundTo<T>(RandomVector(s.dim, seed + 1));
  std::vector<float> want(x.size());
  RmsNorm(x.data(), weight.data(), s.n, s.dim, kEps, want.data());

  const DeviceArray<T> d_x(x), d_weight(weight);
  GuardedOutput<T> out(x.size());
  if (in_place) out.Fill(x);
  const T* src = in_place ? out.get() : d_x.get();
  TPSERVE_ASSERT_CUDA(LaunchRmsNorm(src, d_weight.get(), s.n, s.dim, kEps, out.get(), nullptr));
  TPSERVE_ASSERT_CUDA(cudaDeviceSynchronize());
  EXPECT_LT(RelativeError(out.ToHostCheckingGuards(), want), KernelTolerance<T>())
      << s.n << "x" << s.dim << (in_place ? " in place" : "");
}

template <typename T>
void CheckAddRmsNorm(const Shape& s, bool x_aliases_out, uint32_t seed) {
  const auto residual = RoundTo<T>(RandomVector(s.n * s.dim, seed, 3.0f));
  const auto x = RoundTo<T>(RandomVector(s.n * s.dim, seed + 1));
  const auto weight = RoundTo<T>(RandomVector(s.dim, seed + 2));
  std::vector<float> sum(x.size()), want(x.size());
  for (size_t i = 0; i < x.size(); ++i) sum[i] = residual[i] + x[i];
  sum = RoundTo<T>(sum);  // the kernel keeps the residual in T, so the norm sees it rounded
  RmsNorm(sum.data(), weight.data(), s.n, s.dim, kEps, want.data());

  const DeviceArray<T> d_x(x), d_weight(weight);
  GuardedOutput<T> d_residual(x.size()), out(x.size());
  d_residual.Fill(residual);
  if (x_aliases_out) out.Fill(x);
  const T* src = x_aliases_out ? out.get() : d_x.get();
  TPSERVE_ASSERT_CUDA(LaunchAddRmsNorm(d_residual.get(), src, d_weight.get(), s.n, s.dim, kEps,
                                       out.get(), nullptr));
  TPSERVE_ASSERT_CUDA(cudaDeviceSynchronize());
  const std::string what =
      std::to_string(s.n) + "x" + std::to_string(s.dim) + (x_aliases_out ? " x aliases out" : "");
  // One rounded add per element: exact in both dtypes.
  EXPECT_EQ(d_residual.ToHostCheckingGuards(), sum) << what;
  EXPECT_LT(RelativeError(out.ToHostCheckingGuards(), want), KernelTolerance<T>()) << what;
}

template <typename T>
class RmsNormCudaTest : public ::testing::Test {};
using KernelTypes = ::testing::Types<float, __nv_bfloat16>;
TYPED_TEST_SUITE(RmsNormCudaTest, KernelTypes);

TYPED_TEST(RmsNormCudaTest, MatchesCpuReference) {
  TPSERVE_SKIP_WITHOUT_CUDA();
  uint32_t seed = 1;
  for (const Shape& s : kShapes) {
    for (bool in_place : {false, true}) CheckRmsNorm<TypeParam>(s, in_place, seed += 10);
  }
}

TYPED_TEST(RmsNormCudaTest, FusedResidualAddMatchesCpuReference) {
  TPSERVE_SKIP_WITHOUT_CUDA();
  uint32_t seed = 1000;
  for (const Shape& s : kShapes) {
    for (bool alias : {false, true}) CheckAddRmsNorm<TypeParam>(s, alias, seed += 10);
  }
}

// Size checks happen before any CUDA call, so this runs without a device too.
TEST(RmsNormLaunchTest, RejectsNegativeSizesAndLaunchesNothingWhenEmpty) {
  float* none = nullptr;
  EXPECT_EQ(LaunchRmsNorm<float>(none, none, -1, 8, kEps, none, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(LaunchRmsNorm<float>(none, none, 2, -8, kEps, none, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(LaunchAddRmsNorm<float>(none, none, none, -1, 8, kEps, none, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(LaunchRmsNorm<float>(none, none, 0, 8, kEps, none, nullptr), cudaSuccess);
  EXPECT_EQ(LaunchAddRmsNorm<float>(none, none, none, 3, 0, kEps, none, nullptr), cudaSuccess);
}

}  // namespace
}  // namespace tpserve
