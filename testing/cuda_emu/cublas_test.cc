// The emulated cublasGemmEx (cublas.cc) against a naive column-major reference: every
// transpose pair, leading dimensions larger than the rows (padding the reference never
// reads), m ≠ n ≠ k so that a swap shows, β = 0 over NaN poison and β ≠ 0, bf16, and
// capture into a graph.
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "testing/cuda_emu/emu.h"

namespace tpserve {
namespace {

constexpr int kM = 5, kN = 3, kK = 7, kPad = 3;

struct Matrix {
  int rows, cols, ld;
  std::vector<float> v;  // column-major, ld ≥ rows; padding is NaN
  float& at(int r, int c) { return v[r + static_cast<size_t>(c) * ld]; }
};

Matrix Random(int rows, int cols, uint32_t seed) {
  Matrix x{rows, cols, rows + kPad, std::vector<float>((rows + kPad) * cols, NAN)};
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(-4, 4);  // small integers: exact in bf16 and fp32
  for (int c = 0; c < cols; ++c) {
    for (int r = 0; r < rows; ++r) x.at(r, c) = static_cast<float>(dist(rng));
  }
  return x;
}

template <typename T>
T* Upload(const std::vector<float>& host) {
  std::vector<T> converted(host.size());
  for (size_t i = 0; i < host.size(); ++i) converted[i] = static_cast<T>(host[i]);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, host.size() * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, converted.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
            cudaSuccess);
  return static_cast<T*>(p);
}

template <typename T>
std::vector<float> Download(const T* device, size_t n) {
  std::vector<T> raw(n);
  EXPECT_EQ(cudaMemcpy(raw.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return std::vector<float>(raw.begin(), raw.end());
}

struct Case {
  cublasOperation_t ta, tb;
  float beta;
};

template <typename T>
void CheckGemm(const Case& c, cudaDataType type, cublasComputeType_t compute) {
  // op(A) is m × k: A is stored m × k untransposed, k × m transposed; likewise B.
  const bool ta = c.ta == CUBLAS_OP_T, tb = c.tb == CUBLAS_OP_T;
  Matrix a = Random(ta ? kK : kM, ta ? kM : kK, 1);
  Matrix b = Random(tb ? kN : kK, tb ? kK : kN, 2);
  Matrix cm = Random(kM, kN, 3);
  const float alpha = 1.5f;
  Matrix want = cm;
  for (int i = 0; i < kM; ++i) {
    for (int j = 0; j < kN; ++j) {
      double dot = 0;
      for (int l = 0; l < kK; ++l) dot += double(ta ? a.at(l, i) : a.at(i, l)) * (tb ? b.at(j, l) : b.at(l, j));
      want.at(i, j) = static_cast<float>(alpha * dot + (c.beta == 0 ? 0.0 : c.beta * cm.at(i, j)));
    }
  }
  T* da = Upload<T>(a.v);
  T* db = Upload<T>(b.v);
  // β = 0 must not read C: poison it with NaN.
  if (c.beta == 0) {
    for (int j = 0; j < kN; ++j) {
      for (int i = 0; i < kM; ++i) cm.at(i, j) = NAN;
    }
  }
  T* dc = Upload<T>(cm.v);
  cublasHandle_t handle = nullptr;
  ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasGemmEx(handle, c.ta, c.tb, kM, kN, kK, &alpha, da, type, a.ld, db, type, b.ld,
                         &c.beta, dc, type, cm.ld, compute, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  const std::vector<float> got = Download(dc, cm.v.size());
  for (int j = 0; j < kN; ++j) {
    for (int i = 0; i < kM; ++i) {
      const size_t at = i + static_cast<size_t>(j) * cm.ld;
      EXPECT_EQ(got[at], want.at(i, j)) << "ta " << ta << " tb " << tb << " beta " << c.beta
                                        << " at (" << i << ", " << j << ")";
    }
    for (int i = kM; i < cm.ld; ++i) {
      EXPECT_TRUE(std::isnan(got[i + static_cast<size_t>(j) * cm.ld])) << "padding written";
    }
  }
  cublasDestroy(handle);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
}

const Case kCases[] = {
    {CUBLAS_OP_N, CUBLAS_OP_N, 0.0f}, {CUBLAS_OP_N, CUBLAS_OP_T, 0.0f},
    {CUBLAS_OP_T, CUBLAS_OP_N, 0.0f}, {CUBLAS_OP_T, CUBLAS_OP_T, 0.0f},
    {CUBLAS_OP_N, CUBLAS_OP_N, 0.5f}, {CUBLAS_OP_N, CUBLAS_OP_T, 0.5f},
    {CUBLAS_OP_T, CUBLAS_OP_N, 0.5f}, {CUBLAS_OP_T, CUBLAS_OP_T, 0.5f},
};

TEST(EmuCublasTest, Fp32MatchesTheColumnMajorReference) {
  for (const Case& c : kCases) CheckGemm<float>(c, CUDA_R_32F, CUBLAS_COMPUTE_32F_PEDANTIC);
}

TEST(EmuCublasTest, Bf16MatchesTheColumnMajorReference) {
  for (const Case& c : kCases) CheckGemm<__nv_bfloat16>(c, CUDA_R_16BF, CUBLAS_COMPUTE_32F);
}

TEST(EmuCublasTest, RefusesBadLeadingDimensionsAndMixedTypes) {
  float* d = Upload<float>(std::vector<float>(64, 1.0f));
  cublasHandle_t handle = nullptr;
  ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  const float one = 1.0f, zero = 0.0f;
  // A untransposed is m × k: lda < m is invalid.
  EXPECT_EQ(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, 4, 2, 2, &one, d, CUDA_R_32F, 3, d,
                         CUDA_R_32F, 2, &zero, d, CUDA_R_32F, 4, CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, d, CUDA_R_32F, 2, d,
                         CUDA_R_16BF, 2, &zero, d, CUDA_R_32F, 2, CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_NOT_SUPPORTED);
  cublasDestroy(handle);
  cudaFree(d);
}

TEST(EmuCublasTest, CapturedGemmRunsAtEachGraphLaunch) {
  float* x = Upload<float>({1, 2, 3, 4});  // column-major [[1, 3], [2, 4]]
  float* y = Upload<float>({0, 0, 0, 0});
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  cublasHandle_t handle = nullptr;
  ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasSetStream(handle, stream), CUBLAS_STATUS_SUCCESS);
  const float one = 1.0f;  // y += x · x
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_EQ(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, x, CUDA_R_32F, 2, x,
                         CUDA_R_32F, 2, &one, y, CUDA_R_32F, 2, CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  EXPECT_EQ(Download(y, 4), (std::vector<float>{0, 0, 0, 0})) << "ran during capture";
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int i = 0; i < 2; ++i) ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  // x · x = [[7, 15], [10, 22]], i.e. {7, 10, 15, 22} column-major; twice.
  EXPECT_EQ(Download(y, 4), (std::vector<float>{14, 20, 30, 44}));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cublasDestroy(handle);
  cudaStreamDestroy(stream);
  cudaFree(x);
  cudaFree(y);
}

}  // namespace
}  // namespace tpserve
