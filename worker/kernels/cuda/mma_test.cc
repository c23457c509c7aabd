// mma.cuh's fragment contract against a CPU product: on a device this checks that
// mma.sync lays out its fragments as mma.cuh documents (so a layout mistake shows here,
// not as a wrong attention output); on the emulator it checks the shuffle fallback.
#include <cuda_bf16.h>

#include <vector>

#include "gtest/gtest.h"
#include "worker/cuda/cuda_test_util.h"
#include "worker/kernels/cuda/mma_probe.h"

namespace tpserve {
namespace {

// [rows, k] · [k, cols], row-major fp32.
std::vector<float> MatMul(const std::vector<float>& x, const std::vector<float>& y, int rows,
                          int k, int cols) {
  std::vector<float> out(rows * cols, 0.0f);
  for (int i = 0; i < rows; ++i) {
    for (int j = 0; j < cols; ++j) {
      double sum = 0;
      for (int p = 0; p < k; ++p) sum += double{x[i * k + p]} * y[p * cols + j];
      out[i * cols + j] = static_cast<float>(sum);
    }
  }
  return out;
}

TEST(MmaTest, FragmentsFollowTheDocumentedLayout) {
  TPSERVE_SKIP_WITHOUT_CUDA();
  using T = __nv_bfloat16;
  const std::vector<float> a = RoundTo<T>(RandomVector(16 * 16, 1));
  const std::vector<float> b = RoundTo<T>(RandomVector(16 * 8, 2));
  const std::vector<float> b2 = RoundTo<T>(RandomVector(16 * 8, 3));
  const std::vector<float> c = RoundTo<T>(RandomVector(16 * 8, 4));
  DeviceArray<T> d_a(a), d_b(b), d_b2(b2), d_c(c);
  GuardedOutput<float> d(16 * 8), e(16 * 8);
  TPSERVE_ASSERT_CUDA(
      LaunchMmaProbe(d_a.get(), d_b.get(), d_b2.get(), d_c.get(), d.get(), e.get(), nullptr));
  TPSERVE_ASSERT_CUDA(cudaDeviceSynchronize());

  const std::vector<float> want_d = MatMul(a, b, 16, 16, 8);
  const std::vector<float> want_d2 = MatMul(a, b2, 16, 16, 8);
  // [bf16(d) | bf16(d2)]: the A operand PackA builds from the two C fragments.
  std::vector<float> p(16 * 16);
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 8; ++j) {
      p[i * 16 + j] = want_d[i * 8 + j];
      p[i * 16 + 8 + j] = want_d2[i * 8 + j];
    }
  }
  const std::vector<float> want_e = MatMul(RoundTo<T>(p), c, 16, 16, 8);
  // A misplaced fragment element gives an O(1) error; fp32 accumulation order and a
  // bf16 rounding tie in P stay far below this.
  EXPECT_LT(RelativeError(d.ToHostCheckingGuards(), want_d), 1e-3);
  EXPECT_LT(RelativeError(e.ToHostCheckingGuards(), want_e), 1e-3);
}

}  // namespace
}  // namespace tpserve
