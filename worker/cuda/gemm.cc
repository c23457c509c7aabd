#include "worker/cuda/gemm.h"

#include <limits>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "worker/cuda/cuda_status.h"

namespace tpserve {

absl::StatusOr<std::unique_ptr<CudaGemm>> CudaGemm::Create(cudaStream_t stream) {
  TPSERVE_ASSIGN_OR_RETURN(DeviceBuffer workspace, DeviceBuffer::Create(kWorkspaceBytes));
  cublasHandle_t handle = nullptr;
  TPSERVE_CUBLAS_RETURN_IF_ERROR(cublasCreate(&handle));
  std::unique_ptr<CudaGemm> gemm(new CudaGemm(handle, std::move(workspace)));
  TPSERVE_CUBLAS_RETURN_IF_ERROR(cublasSetStream(handle, stream));
  TPSERVE_CUBLAS_RETURN_IF_ERROR(
      cublasSetWorkspace(handle, gemm->workspace_.data(), gemm->workspace_.bytes()));
  return gemm;
}

CudaGemm::~CudaGemm() { cublasDestroy(handle_); }

template <typename T>
absl::Status CudaGemm::MatMulTransB(const T* x, const T* w, int64_t n, int64_t k, int64_t m,
                                    T* y, bool accumulate) const {
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  if (n < 0 || k < 0 || m < 0 || n > kMax || k > kMax || m > kMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("CudaGemm: sizes n=", n, " k=", k, " m=", m, " outside [0, 2^31)"));
  }
  if (n == 0 || m == 0) return absl::OkStatus();
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  const cudaDataType_t type = kBf16 ? CUDA_R_16BF : CUDA_R_32F;
  const cublasComputeType_t compute = kBf16 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_PEDANTIC;
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  // Row-major y[n, m] is column-major yᵀ[m, n] = w[m, k] · xᵀ[k, n]; row-major w is
  // column-major wᵀ (k × m, ld k), so it enters transposed, x untransposed.
  TPSERVE_CUBLAS_RETURN_IF_ERROR(cublasGemmEx(
      handle_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(m), static_cast<int>(n),
      static_cast<int>(k), &alpha, w, type, static_cast<int>(k), x, type, static_cast<int>(k),
      &beta, y, type, static_cast<int>(m), compute, CUBLAS_GEMM_DEFAULT));
  return absl::OkStatus();
}

template absl::Status CudaGemm::MatMulTransB<float>(const float*, const float*, int64_t, int64_t,
                                                    int64_t, float*, bool) const;
template absl::Status CudaGemm::MatMulTransB<__nv_bfloat16>(const __nv_bfloat16*,
                                                            const __nv_bfloat16*, int64_t, int64_t,
                                                            int64_t, __nv_bfloat16*, bool) const;

}  // namespace tpserve
