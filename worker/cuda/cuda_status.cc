#include "worker/cuda/cuda_status.h"

#include <cublas_v2.h>

#include "absl/strings/str_cat.h"

namespace tpserve {

absl::Status CudaStatus(cudaError_t err, absl::string_view what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(what, ": ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")"));
}

absl::Status CublasStatus(cublasStatus_t err, absl::string_view what) {
  if (err == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cublasGetStatusName(err), " (",
                                          cublasGetStatusString(err), ")"));
}

absl::Status CudaDeviceAvailable() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    return absl::FailedPreconditionError(
        absl::StrCat("no usable CUDA device: ", cudaGetErrorName(err), " (",
                     cudaGetErrorString(err), ")"));
  }
  if (count == 0) return absl::FailedPreconditionError("no CUDA device present");
  return absl::OkStatus();
}

}  // namespace tpserve
