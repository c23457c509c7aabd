// SiLU·mul on the GPU against the CPU reference, with guard regions around the output.
// Tagged "gpu"; skips when no CUDA device is present.
#include "worker/kernels/cuda/silu_mul.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "worker/kernels/cpu/norm_activation.h"

namespace tpserve {
namespace {

constexpr float kGuard = -7777.0f;
constexpr int kGuardLen = 64;

TEST(SiluMulCudaTest, MatchesCpuReference) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    GTEST_SKIP() << "no CUDA device";
  }
  for (auto [n, width] : {std::pair<int64_t, int64_t>{1, 1}, {7, 129}, {333, 1024}}) {
    std::mt19937 rng(1);
    std::normal_distribution<float> dist(0.0f, 3.0f);
    std::vector<float> in(n * 2 * width);
    for (float& v : in) v = dist(rng);
    std::vector<float> want(n * width);
    SiluMul(in.data(), n, width, want.data());

    float *d_in = nullptr, *d_out = nullptr;
    const size_t out_len = n * width + 2 * kGuardLen;
    ASSERT_EQ(cudaMalloc(&d_in, in.size() * sizeof(float)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&d_out, out_len * sizeof(float)), cudaSuccess);
    std::vector<float> got(out_len, kGuard);
    ASSERT_EQ(cudaMemcpy(d_in, in.data(), in.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(d_out, got.data(), out_len * 4, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(LaunchSiluMul(d_in, n, width, d_out + kGuardLen, nullptr), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(got.data(), d_out, out_len * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    cudaFree(d_in);
    cudaFree(d_out);

    double err = 0, norm = 0;
    for (int64_t i = 0; i < n * width; ++i) {
      err += std::pow(got[kGuardLen + i] - want[i], 2);
      norm += std::pow(want[i], 2);
    }
    EXPECT_LT(std::sqrt(err / norm), 1e-5) << n << "x" << width;
    for (int i = 0; i < kGuardLen; ++i) {
      EXPECT_EQ(got[i], kGuard);
      EXPECT_EQ(got[kGuardLen + n * width + i], kGuard);
    }
  }
}

}  // namespace
}  // namespace tpserve
