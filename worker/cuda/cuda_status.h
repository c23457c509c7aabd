// Conversions from CUDA and cuBLAS return codes to absl::Status (NCCL's live beside
// NcclCommGroup, so that only the collectives link libnccl).
//
// Every runtime call of the CUDA backend goes through one of these, so a failing call
// becomes an INTERNAL status naming the call and the library's own error text instead
// of a crash or a silently wrong result. Pure functions; any thread.
#ifndef TPSERVE_WORKER_CUDA_CUDA_STATUS_H_
#define TPSERVE_WORKER_CUDA_CUDA_STATUS_H_

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tpserve {

// OK for cudaSuccess, else INTERNAL "what: cudaErrorName (description)".
absl::Status CudaStatus(cudaError_t err, absl::string_view what);
// OK for CUBLAS_STATUS_SUCCESS, else INTERNAL "what: CUBLAS_STATUS_...".
absl::Status CublasStatus(cublasStatus_t err, absl::string_view what);

// OK when a CUDA device can be used by this process; FAILED_PRECONDITION otherwise
// (no driver, no device), naming why.
absl::Status CudaDeviceAvailable();

}  // namespace tpserve

// Returns from the enclosing function with the status of a failed CUDA call.
#define TPSERVE_CUDA_RETURN_IF_ERROR(expr)                                   \
  do {                                                                       \
    if (absl::Status _cuda_status = ::tpserve::CudaStatus((expr), #expr);    \
        !_cuda_status.ok()) {                                                \
      return _cuda_status;                                                   \
    }                                                                        \
  } while (0)

#define TPSERVE_CUBLAS_RETURN_IF_ERROR(expr)                                 \
  do {                                                                       \
    if (absl::Status _cublas_status = ::tpserve::CublasStatus((expr), #expr); \
        !_cublas_status.ok()) {                                              \
      return _cublas_status;                                                 \
    }                                                                        \
  } while (0)

#endif  // TPSERVE_WORKER_CUDA_CUDA_STATUS_H_
