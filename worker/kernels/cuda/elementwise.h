// CUDA elementwise and data-movement kernels of the forward pass: bias and residual adds,
// row gathers (the last token of each sequence before the LM head), dtype conversion,
// and the reassembly of the vocab-parallel LM head's all-gathered shards into logits.
// References are in elementwise_test.cc.
//
// T is float or __nv_bfloat16; adds are fp32 rounded to T once, conversions round to
// nearest even, copies are bit for bit. Each launcher launches on `stream` and returns
// the launch's error (cudaErrorInvalidValue for invalid sizes, cudaSuccess without a
// launch for empty ones); no allocation, no sync, and the launch shape depends only on
// the sizes, so the launches can be graph-captured.
#ifndef TPSERVE_WORKER_KERNELS_CUDA_ELEMENTWISE_H_
#define TPSERVE_WORKER_KERNELS_CUDA_ELEMENTWISE_H_

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace tpserve {

// y[i, :] += bias, per row.
template <typename T>
cudaError_t LaunchAddBias(T* y,           // [n, m]
                          const T* bias,  // [m]
                          int64_t n, int64_t m, cudaStream_t stream);

// y += x, elementwise; x may alias y.
template <typename T>
cudaError_t LaunchAdd(T* y,        // [count]
                      const T* x,  // [count]
                      int64_t count, cudaStream_t stream);

// out[i] = x[rows[i]]; the caller guarantees every rows[i] indexes a row of x.
template <typename T>
cudaError_t LaunchGatherRows(const T* x,           // [rows of x, dim]
                             const int32_t* rows,  // [num_rows]
                             int64_t num_rows, int64_t dim,
                             T* out,  // [num_rows, dim]
                             cudaStream_t stream);

// out = in converted: float ↔ bf16 (round to nearest even) or a same-type copy.
// Instantiated for float→bf16, bf16→float, float→float and bf16→bf16.
template <typename Src, typename Dst>
cudaError_t LaunchConvert(const Src* in,  // [count]
                          int64_t count,
                          Dst* out,  // [count]; must not overlap in
                          cudaStream_t stream);

// logits[i, r·cols + c] = gathered[r, i, c] for r·cols + c < vocab: the tp ranks'
// [n, cols] LM-head shards, all-gathered rank-major, become fp32 logits over the true
// vocab (the padding of the last shard, columns ≥ vocab, is dropped).
template <typename T>
cudaError_t LaunchUngatherVocab(const T* gathered,  // [tp, n, cols], tp·cols ≥ vocab
                                int tp, int64_t n, int64_t cols, int64_t vocab,
                                float* logits,  // [n, vocab]
                                cudaStream_t stream);

}  // namespace tpserve

#endif  // TPSERVE_WORKER_KERNELS_CUDA_ELEMENTWISE_H_
