#include "worker/kernels/cpu/bf16_gemm_testing.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "worker/dtype.h"
#include "worker/kernels/cpu/gemm.h"

namespace tpserve {
namespace {

constexpr float kGuard = 12345.0f;
constexpr int64_t kGuardFloats = 16;

float RoundToBf16(float f) { return Bf16ToFloat(FloatToBf16(f)); }

}  // namespace

std::vector<float> RandomNormal(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<float> v(static_cast<size_t>(count));
  for (float& f : v) f = dist(rng);
  return v;
}

PackedBf16Weight RandomWeight(int64_t n_out, int64_t k, uint32_t seed,
                              std::vector<float>* w_rounded) {
  std::vector<float> w = RandomNormal(n_out * k, seed);
  absl::StatusOr<PackedBf16Weight> packed = PackedBf16Weight::FromFloat(w.data(), n_out, k);
  EXPECT_TRUE(packed.ok()) << packed.status();
  if (w_rounded != nullptr) {
    for (float& f : w) f = RoundToBf16(f);
    *w_rounded = std::move(w);
  }
  return *std::move(packed);
}

void ExpectMatchesReference(const PackedWeight& w, const std::vector<float>& w_rounded,
                            int64_t m, bool accumulate, uint32_t seed,
                            int64_t max_checked_rows, RoundXRow round_x) {
  const int64_t n = w.n_out(), k = w.k();
  std::vector<float> x = RandomNormal(m * k, seed);                 // [m, k]
  std::vector<float> y0 = RandomNormal(m * n, seed + 1);            // [m, n]
  std::vector<float> got(m * n + 2 * kGuardFloats, kGuard);         // guard | [m, n] | guard
  float* y = got.data() + kGuardFloats;
  if (accumulate) std::copy(y0.begin(), y0.end(), y);
  ASSERT_TRUE(w.MatMul(x.data(), m, y, accumulate).ok());
  for (int64_t i = 0; i < kGuardFloats; ++i) {
    ASSERT_EQ(got[i], kGuard) << "write before y";
    ASSERT_EQ(got[kGuardFloats + m * n + i], kGuard) << "write past y";
  }
  const double tol = 4.0 * std::sqrt(double(k)) * std::ldexp(1.0, -24);
  std::vector<float> x_row(k), want(n);
  const int64_t checked = std::min(m, max_checked_rows);
  for (int64_t c = 0; c < checked; ++c) {
    const int64_t i = checked == 1 ? 0 : c * (m - 1) / (checked - 1);  // first..last
    if (round_x != nullptr) {
      round_x(&x[i * k], k, x_row.data());
    } else {
      for (int64_t p = 0; p < k; ++p) x_row[p] = RoundToBf16(x[i * k + p]);
    }
    for (int64_t j = 0; j < n; ++j) want[j] = accumulate ? y0[i * n + j] : 0.0f;
    MatMulTransBReference(x_row.data(), w_rounded.data(), 1, k, n, want.data(), accumulate);
    int bad = 0;
    for (int64_t j = 0; j < n && bad < 5; ++j) {
      double magnitude = accumulate ? std::fabs(y0[i * n + j]) : 0.0;
      for (int64_t p = 0; p < k; ++p) magnitude += std::fabs(x_row[p] * w_rounded[j * k + p]);
      if (std::fabs(double(y[i * n + j]) - want[j]) > tol * magnitude) {
        ADD_FAILURE() << "y[" << i << ", " << j << "] = " << y[i * n + j] << ", want " << want[j]
                      << " (m " << m << ", n_out " << n << ", k " << k << ", accumulate "
                      << accumulate << ")";
        ++bad;
      }
    }
  }
}

}  // namespace tpserve
