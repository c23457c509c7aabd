// CUDA masked embedding lookup of a vocab-parallel table: each tp rank holds the rows
// [vocab_start, vocab_start + rows) of the embedding and writes zeros for ids outside
// them, so an all-reduce (sum) over the ranks gives the full lookup. Its reference is in
// embedding_test.cc.
//
// T is float or __nv_bfloat16; rows are copied bit for bit. Launches on `stream` and
// returns the launch's error (cudaErrorInvalidValue for negative sizes, cudaSuccess
// without a launch for empty ones); no allocation, no sync, and the launch shape depends
// only on the sizes, so the launch can be graph-captured.
#ifndef TPSERVE_WORKER_KERNELS_CUDA_EMBEDDING_H_
#define TPSERVE_WORKER_KERNELS_CUDA_EMBEDDING_H_

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace tpserve {

// out[i] = weight[ids[i] − vocab_start] when vocab_start ≤ ids[i] < vocab_start + rows,
// else zeros. Any id is allowed (negative, past the vocab).
template <typename T>
cudaError_t LaunchEmbedding(const int32_t* ids,  // [n]
                            int64_t n,
                            const T* weight,  // [rows, dim]: vocab rows from vocab_start
                            int64_t vocab_start, int64_t rows, int64_t dim,
                            T* out,  // [n, dim]
                            cudaStream_t stream);

}  // namespace tpserve

#endif  // TPSERVE_WORKER_KERNELS_CUDA_EMBEDDING_H_
