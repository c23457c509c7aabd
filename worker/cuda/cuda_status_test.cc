#include "worker/cuda/cuda_status.h"

#include <cublas_v2.h>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

TEST(CudaStatusTest, SuccessIsOk) {
  EXPECT_TRUE(CudaStatus(cudaSuccess, "x").ok());
  EXPECT_TRUE(CublasStatus(CUBLAS_STATUS_SUCCESS, "x").ok());
}

TEST(CudaStatusTest, ErrorsNameTheCallAndTheCode) {
  absl::Status s = CudaStatus(cudaErrorMemoryAllocation, "cudaMalloc(weights)");
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_NE(s.message().find("cudaMalloc(weights)"), std::string::npos) << s;
  EXPECT_NE(s.message().find("cudaErrorMemoryAllocation"), std::string::npos) << s;
  s = CublasStatus(CUBLAS_STATUS_INVALID_VALUE, "cublasGemmEx");
  EXPECT_NE(s.message().find("CUBLAS_STATUS_INVALID_VALUE"), std::string::npos) << s;
}

absl::Status ReturnsFirstError() {
  TPSERVE_CUDA_RETURN_IF_ERROR(cudaSuccess);
  TPSERVE_CUDA_RETURN_IF_ERROR(cudaErrorInvalidValue);
  return absl::OkStatus();
}

TEST(CudaStatusTest, MacroReturnsTheFailure) {
  absl::Status s = ReturnsFirstError();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_NE(s.message().find("cudaErrorInvalidValue"), std::string::npos) << s;
}

// On a machine without a GPU this is the path the worker takes for --device cuda.
TEST(CudaStatusTest, DeviceAvailabilityIsAStatusNotACrash) {
  absl::Status s = CudaDeviceAvailable();
  if (!s.ok()) { EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s; }
}

}  // namespace
}  // namespace tpserve
