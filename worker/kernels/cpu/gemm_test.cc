#include "worker/kernels/cpu/gemm.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

constexpr float kGuard = 12345.0f;

TEST(GemmTest, MatchesReferenceWithGuards) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist;
  for (auto [n, k, m] : {std::tuple<int, int, int>{1, 1, 1}, {1, 300, 77}, {3, 17, 5}, {64, 96, 33}, {7, 256, 130}}) {
    std::vector<float> x(n * k), w(m * k);
    for (float& v : x) v = dist(rng);
    for (float& v : w) v = dist(rng);
    for (bool acc : {false, true}) {
      // y lives between two guard regions that must survive untouched.
      std::vector<float> got(n * m + 32, kGuard), want(n * m, 0.5f);
      for (int i = 0; i < n * m; ++i) got[16 + i] = 0.5f;
      MatMulTransB(x.data(), w.data(), n, k, m, got.data() + 16, acc);
      MatMulTransBReference(x.data(), w.data(), n, k, m, want.data(), acc);
      double err = 0, norm = 0;
      for (int i = 0; i < n * m; ++i) {
        err += std::pow(got[16 + i] - want[i], 2);
        norm += std::pow(want[i], 2);
      }
      EXPECT_LT(std::sqrt(err / norm), 1e-5) << n << "x" << k << "x" << m;
      for (int i = 0; i < 16; ++i) {
        EXPECT_EQ(got[i], kGuard);
        EXPECT_EQ(got[16 + n * m + i], kGuard);
      }
    }
  }
}

}  // namespace
}  // namespace tpserve
