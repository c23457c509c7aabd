#include "worker/kernels/cuda/embedding.h"

#include <algorithm>
#include <limits>

#include "worker/kernels/cuda/launch.cuh"
#include "worker/kernels/cuda/vec.cuh"

namespace tpserve {
namespace {

constexpr int kMaxThreads = 256;

// Grid (n, column blocks); each thread moves N consecutive elements of one output row.
template <typename T, int N>
__global__ void __launch_bounds__(kMaxThreads)
    EmbeddingKernel(const int32_t* __restrict__ ids, const T* __restrict__ weight,
                    int64_t vocab_start, int64_t rows, int dim, T* __restrict__ out) {
  const int col = (blockIdx.y * blockDim.x + threadIdx.x) * N;
  if (col >= dim) return;
  const int64_t local = int64_t{ids[blockIdx.x]} - vocab_start;
  Chunk<T, N> v{};  // zeros (+0.0 in fp32 and bf16) for ids of other ranks
  if (local >= 0 && local < rows) {
    v = LoadVec<Chunk<T, N>>(weight + local * dim + col);
  }
  StoreVec(out + int64_t{blockIdx.x} * dim + col, v);
}

}  // namespace

template <typename T>
cudaError_t LaunchEmbedding(const int32_t* ids, int64_t n, const T* weight, int64_t vocab_start,
                            int64_t rows, int64_t dim, T* out, cudaStream_t stream) {
  constexpr int64_t kMaxInt = std::numeric_limits<int>::max();
  if (n < 0 || rows < 0 || dim < 0 || vocab_start < 0 || n > kMaxInt || dim > kMaxInt) {
    return cudaErrorInvalidValue;
  }
  if (n == 0 || dim == 0) return cudaSuccess;
  const bool vector = dim % kVec<T> == 0 && Aligned16(weight) && Aligned16(out);
  const int64_t per_row = vector ? dim / kVec<T> : dim;
  const int threads = static_cast<int>(std::min<int64_t>(kMaxThreads, (per_row + 31) / 32 * 32));
  const int64_t column_blocks = (per_row + threads - 1) / threads;
  if (column_blocks > 65535) return cudaErrorInvalidValue;  // gridDim.y's limit
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(column_blocks));
  const auto kernel = vector ? EmbeddingKernel<T, kVec<T>> : EmbeddingKernel<T, 1>;
  return LaunchKernel(kernel, grid, threads, 0, stream, ids, weight, vocab_start, rows,
                      static_cast<int>(dim), out);
}

template cudaError_t LaunchEmbedding(const int32_t*, int64_t, const float*, int64_t, int64_t,
                                     int64_t, float*, cudaStream_t);
template cudaError_t LaunchEmbedding(const int32_t*, int64_t, const __nv_bfloat16*, int64_t,
                                     int64_t, int64_t, __nv_bfloat16*, cudaStream_t);

}  // namespace tpserve
