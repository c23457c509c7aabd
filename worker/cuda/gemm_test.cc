// cuBLAS GEMM against the CPU reference triple loop, both dtypes, with guard regions.
#include "worker/cuda/gemm.h"

#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "worker/cuda/cuda_test_util.h"
#include "worker/kernels/cpu/gemm.h"

namespace tpserve {
namespace {

template <typename T>
void CheckGemm(int64_t n, int64_t k, int64_t m, bool accumulate, uint32_t seed) {
  SCOPED_TRACE(testing::Message() << n << "x" << k << "x" << m << " acc=" << accumulate);
  const std::vector<float> x = RoundTo<T>(RandomVector(n * k, seed));
  const std::vector<float> w = RoundTo<T>(RandomVector(m * k, seed + 1, 0.05f));
  const std::vector<float> y0 = RoundTo<T>(RandomVector(n * m, seed + 2));
  std::vector<float> want = y0;
  MatMulTransBReference(x.data(), w.data(), n, k, m, want.data(), accumulate);

  absl::StatusOr<std::unique_ptr<CudaGemm>> gemm = CudaGemm::Create(nullptr);
  ASSERT_TRUE(gemm.ok()) << gemm.status();
  DeviceArray<T> dx(x), dw(w);
  GuardedOutput<T> dy(n * m);
  if (accumulate) {
    DeviceArray<T> init(y0);
    TPSERVE_ASSERT_CUDA(
        cudaMemcpy(dy.get(), init.get(), n * m * sizeof(T), cudaMemcpyDeviceToDevice));
  }
  absl::Status s = (*gemm)->MatMulTransB(dx.get(), dw.get(), n, k, m, dy.get(), accumulate);
  ASSERT_TRUE(s.ok()) << s;
  TPSERVE_ASSERT_CUDA(cudaDeviceSynchronize());
  EXPECT_LT(RelativeError(dy.ToHostCheckingGuards(), want), KernelTolerance<T>());
}

TEST(CudaGemmTest, MatchesReferenceFloat) {
  TPSERVE_SKIP_WITHOUT_CUDA();
  uint32_t seed = 10;
  for (auto [n, k, m] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {1, 64, 320},
                         {3, 48, 509}, {7, 129, 33}, {64, 1024, 768}, {300, 256, 2048}}) {
    CheckGemm<float>(n, k, m, false, seed += 3);
    CheckGemm<float>(n, k, m, true, seed += 3);
  }
}

TEST(CudaGemmTest, MatchesReferenceBf16) {
  TPSERVE_SKIP_WITHOUT_CUDA();
  uint32_t seed = 100;
  for (auto [n, k, m] : {std::tuple<int64_t, int64_t, int64_t>{1, 4096, 1024}, {3, 48, 509},
                         {8, 4096, 6144}, {256, 1024, 4096}}) {
    CheckGemm<__nv_bfloat16>(n, k, m, false, seed += 3);
    CheckGemm<__nv_bfloat16>(n, k, m, true, seed += 3);
  }
}

TEST(CudaGemmTest, RejectsSizesCublasCannotTake) {
  TPSERVE_SKIP_WITHOUT_CUDA();
  absl::StatusOr<std::unique_ptr<CudaGemm>> gemm = CudaGemm::Create(nullptr);
  ASSERT_TRUE(gemm.ok()) << gemm.status();
  absl::Status s = (*gemm)->MatMulTransB<float>(nullptr, nullptr, int64_t{1} << 33, 4, 4, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

}  // namespace
}  // namespace tpserve
