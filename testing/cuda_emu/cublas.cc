// The cuBLAS calls of worker/cuda/gemm.cc, defined for the CUDA emulator (emu.h)
// in place of libcublas: handles, their stream and workspace, and cublasGemmEx with
// cuBLAS's column-major semantics (C = α·op(A)·op(B) + β·C, op ∈ {N, T}, leading
// dimensions, β = 0 not reading C) for fp32 and bf16 operands with fp32 accumulation.
//
// A GEMM is stream work (stream_work.h): it runs at the call, or is recorded when the
// handle's stream captures. Operands outside device memory abort, as the fault a device
// would raise. Not modelled: cuBLAS's summation order and its algorithms (each output is
// one sequential fp32 dot product, so it may differ from a device in the last bits), TF32,
// device pointer mode, and every call that gemm.cc does not make.
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "testing/cuda_emu/stream_work.h"

struct cublasContext {
  cudaStream_t stream = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

namespace tpserve {
namespace emu {
namespace {

// A column-major operand as op(X) reads it: element (row, col) of op(X).
struct Operand {
  const void* data;
  cudaDataType type;
  int64_t row_stride, col_stride;

  float At(int64_t row, int64_t col) const {
    const int64_t i = row * row_stride + col * col_stride;
    return type == CUDA_R_32F ? static_cast<const float*>(data)[i]
                              : __bfloat162float(static_cast<const __nv_bfloat16*>(data)[i]);
  }
};

Operand Op(const void* data, cudaDataType type, cublasOperation_t op, int64_t ld) {
  return op == CUBLAS_OP_N ? Operand{data, type, 1, ld} : Operand{data, type, ld, 1};
}

// The elements an operand of `rows` × `cols` (as stored) with leading dimension `ld`
// spans, so that its bytes can be checked against the allocations.
size_t Span(int64_t rows, int64_t cols, int64_t ld, cudaDataType type) {
  if (rows == 0 || cols == 0) return 0;
  return static_cast<size_t>((cols - 1) * ld + rows) * (type == CUDA_R_32F ? 4 : 2);
}

void CheckDeviceOperand(const char* name, const void* p, size_t bytes) {
  if (bytes == 0 || IsDeviceMemory(p, bytes)) return;
  std::fprintf(stderr, "emu: cublasGemmEx: operand %s (%zu bytes at %p) is not inside one "
               "device allocation\n", name, bytes, p);
  std::abort();
}

void Gemm(int64_t m, int64_t n, int64_t k, float alpha, Operand a, Operand b, float beta,
          void* c, cudaDataType type, int64_t ldc) {
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < m; ++i) {
      float dot = 0;
      for (int64_t l = 0; l < k; ++l) dot += a.At(i, l) * b.At(l, j);
      const int64_t at = i + j * ldc;
      if (type == CUDA_R_32F) {
        float& out = static_cast<float*>(c)[at];
        out = beta == 0 ? alpha * dot : alpha * dot + beta * out;
      } else {
        __nv_bfloat16& out = static_cast<__nv_bfloat16*>(c)[at];
        const float acc = beta == 0 ? alpha * dot : alpha * dot + beta * __bfloat162float(out);
        out = __float2bfloat16(acc);
      }
    }
  }
}

// fp32 or bf16 operands, fp32 accumulation (no TF32).
bool Supported(cudaDataType type, cublasComputeType_t compute) {
  return (type == CUDA_R_32F || type == CUDA_R_16BF) &&
         (compute == CUBLAS_COMPUTE_32F || compute == CUBLAS_COMPUTE_32F_PEDANTIC);
}

}  // namespace
}  // namespace emu
}  // namespace tpserve

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace(cublasHandle_t handle, void* workspace, size_t bytes) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  // cuBLAS wants 256-byte alignment of a user workspace.
  if ((bytes > 0 && !tpserve::emu::IsDeviceMemory(workspace, bytes)) ||
      reinterpret_cast<uintptr_t>(workspace) % 256 != 0) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  handle->workspace = workspace;
  handle->workspace_bytes = bytes;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void* alpha,
                            const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C,
                            cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                            cublasGemmAlgo_t) {
  using namespace tpserve::emu;
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  const bool ops_ok = (transa == CUBLAS_OP_N || transa == CUBLAS_OP_T) &&
                      (transb == CUBLAS_OP_N || transb == CUBLAS_OP_T);
  // op(A) is m × k, op(B) k × n, C m × n; A is stored m × k (N) or k × m (T).
  const int a_rows = transa == CUBLAS_OP_N ? m : k, a_cols = transa == CUBLAS_OP_N ? k : m;
  const int b_rows = transb == CUBLAS_OP_N ? k : n, b_cols = transb == CUBLAS_OP_N ? n : k;
  if (!ops_ok || m < 0 || n < 0 || k < 0 || lda < std::max(1, a_rows) ||
      ldb < std::max(1, b_rows) || ldc < std::max(1, m) || alpha == nullptr || beta == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (Atype != Btype || Atype != Ctype || !Supported(Atype, computeType)) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  CheckDeviceOperand("A", A, k == 0 ? 0 : Span(a_rows, a_cols, lda, Atype));
  CheckDeviceOperand("B", B, k == 0 ? 0 : Span(b_rows, b_cols, ldb, Btype));
  CheckDeviceOperand("C", C, Span(m, n, ldc, Ctype));
  // Host pointer mode: the scalars are read now, the operands when the work runs.
  const float a = *static_cast<const float*>(alpha), b = *static_cast<const float*>(beta);
  const Operand op_a = Op(A, Atype, transa, lda), op_b = Op(B, Btype, transb, ldb);
  const cudaError_t err = EnqueueStreamWork(
      handle->stream, [=] { Gemm(m, n, k, a, op_a, op_b, b, C, Ctype, ldc); });
  return err == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    default: return "CUBLAS_STATUS_UNKNOWN (emulated)";
  }
}

const char* cublasGetStatusString(cublasStatus_t status) {
  return status == CUBLAS_STATUS_SUCCESS ? "success" : "an error of the emulated cuBLAS";
}
