// CudaGemm: the GEMMs of the CUDA linear layers, y = x · wᵀ with HF's [out, in] weight
// layout, through cuBLAS with fp32 accumulation.
//
// bf16 operands use CUBLAS_COMPUTE_32F (tensor cores, fp32 accumulate); fp32 operands
// use CUBLAS_COMPUTE_32F_PEDANTIC, so no TF32 rounding creeps into the fp32 path that
// is compared with the CPU goldens. The handle runs on the stream given at Create and
// owns a fixed workspace, so calls never allocate and can be captured in CUDA graphs.
// One instance per rank, used by that rank's compute thread only.
#ifndef TPSERVE_WORKER_CUDA_GEMM_H_
#define TPSERVE_WORKER_CUDA_GEMM_H_

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/cuda/device_buffer.h"

namespace tpserve {

class CudaGemm {
 public:
  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;

  static absl::StatusOr<std::unique_ptr<CudaGemm>> Create(cudaStream_t stream);
  ~CudaGemm();
  CudaGemm(const CudaGemm&) = delete;
  CudaGemm& operator=(const CudaGemm&) = delete;

  // x: [n, k], w: [m, k] -> y: [n, m] (device pointers, row-major). If accumulate,
  // y += x · wᵀ, else y = x · wᵀ. T is float or __nv_bfloat16. Enqueued on the stream.
  template <typename T>
  absl::Status MatMulTransB(const T* x, const T* w, int64_t n, int64_t k, int64_t m, T* y,
                            bool accumulate = false) const;

 private:
  CudaGemm(cublasHandle_t handle, DeviceBuffer workspace)
      : handle_(handle), workspace_(std::move(workspace)) {}
  cublasHandle_t handle_;
  DeviceBuffer workspace_;
};

}  // namespace tpserve

#endif  // TPSERVE_WORKER_CUDA_GEMM_H_
