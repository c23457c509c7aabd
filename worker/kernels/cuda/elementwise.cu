#include "worker/kernels/cuda/elementwise.h"

#include <algorithm>
#include <limits>
#include <type_traits>

#include "worker/kernels/cuda/launch.cuh"
#include "worker/kernels/cuda/vec.cuh"

namespace tpserve {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxFlatBlocks = 8192;  // grid-stride beyond: ~8 waves on an H200

// Same type: the bits; otherwise through fp32, rounding to nearest even.
template <typename Dst, typename Src>
__device__ __forceinline__ Dst Convert(Src v) {
  if constexpr (std::is_same_v<Src, Dst>) {
    return v;
  } else {
    return FromFloat<Dst>(ToFloat(v));
  }
}

template <typename T, int N>
__device__ __forceinline__ Chunk<T, N> LoadChunk(const T* p) {
  return LoadVec<Chunk<T, N>>(p);
}

template <typename T, int N>
__device__ __forceinline__ void StoreChunk(T* p, const Chunk<T, N>& c) {
  StoreVec(p, c);
}

// a = a + b per element, in fp32, rounded to T.
template <typename T, int N>
__device__ __forceinline__ void AddChunk(Chunk<T, N>& a, const Chunk<T, N>& b) {
#pragma unroll
  for (int k = 0; k < N; ++k) a.v[k] = FromFloat<T>(ToFloat(a.v[k]) + ToFloat(b.v[k]));
}

template <typename Dst, int N, typename Src>
__device__ __forceinline__ Chunk<Dst, N> ConvertChunk(const Chunk<Src, N>& in) {
  Chunk<Dst, N> out;
#pragma unroll
  for (int k = 0; k < N; ++k) out.v[k] = Convert<Dst>(in.v[k]);
  return out;
}

// Row kernels: grid (rows, column blocks), N consecutive columns per thread, so no thread
// divides by the row length.
__device__ __forceinline__ int RowColumn(int n) {
  return (blockIdx.y * blockDim.x + threadIdx.x) * n;
}

template <typename T, int N>
__global__ void __launch_bounds__(kThreads)
    AddBiasKernel(T* __restrict__ y, const T* __restrict__ bias, int m) {
  const int col = RowColumn(N);
  if (col >= m) return;
  T* row = y + int64_t{blockIdx.x} * m + col;
  Chunk<T, N> v = LoadChunk<T, N>(row);
  AddChunk(v, LoadChunk<T, N>(bias + col));
  StoreChunk(row, v);
}

template <typename T, int N>
__global__ void __launch_bounds__(kThreads)
    GatherRowsKernel(const T* __restrict__ x, const int32_t* __restrict__ rows, int dim,
                     T* __restrict__ out) {
  const int col = RowColumn(N);
  if (col >= dim) return;
  const int64_t src = rows[blockIdx.x];
  StoreChunk(out + int64_t{blockIdx.x} * dim + col, LoadChunk<T, N>(x + src * dim + col));
}

// Grid (n, tp, column blocks of a shard).
template <typename T, int N>
__global__ void __launch_bounds__(kThreads)
    UngatherVocabKernel(const T* __restrict__ gathered, int64_t n, int cols, int64_t vocab,
                        float* __restrict__ logits) {
  const int c = (blockIdx.z * blockDim.x + threadIdx.x) * N;
  const int64_t j = int64_t{blockIdx.y} * cols + c;  // the vocab column
  if (c >= cols || j >= vocab) return;  // N divides vocab: a chunk is all in or all out
  const T* src = gathered + (int64_t{blockIdx.y} * n + blockIdx.x) * cols + c;
  StoreChunk(logits + int64_t{blockIdx.x} * vocab + j,
             ConvertChunk<float, N>(LoadChunk<T, N>(src)));
}

// Flat kernels: chunks of N by a grid-stride loop, then the count % N last elements.
template <typename T, int N>
__global__ void __launch_bounds__(kThreads) AddKernel(T* y, const T* x, int64_t count) {
  const int64_t first = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t chunks = count / N;
  for (int64_t c = first; c < chunks; c += stride) {
    Chunk<T, N> v = LoadChunk<T, N>(y + c * N);
    AddChunk(v, LoadChunk<T, N>(x + c * N));
    StoreChunk(y + c * N, v);
  }
  for (int64_t i = chunks * N + first; i < count; i += stride) {
    y[i] = FromFloat<T>(ToFloat(y[i]) + ToFloat(x[i]));
  }
}

template <typename Src, typename Dst, int N>
__global__ void __launch_bounds__(kThreads)
    ConvertKernel(const Src* __restrict__ in, int64_t count, Dst* __restrict__ out) {
  const int64_t first = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t chunks = count / N;
  for (int64_t c = first; c < chunks; c += stride) {
    StoreChunk(out + c * N, ConvertChunk<Dst, N>(LoadChunk<Src, N>(in + c * N)));
  }
  for (int64_t i = chunks * N + first; i < count; i += stride) out[i] = Convert<Dst>(in[i]);
}

constexpr int64_t kMaxInt = std::numeric_limits<int>::max();
constexpr int64_t kMaxGridY = 65535;

int ThreadsFor(int64_t chunks) {
  return static_cast<int>(std::min<int64_t>(kThreads, (chunks + 31) / 32 * 32));
}

// Grid (rows, column blocks) over `per_row` chunks per row; false past CUDA's limits.
bool RowGrid(int64_t rows, int64_t per_row, dim3* grid, int* threads) {
  *threads = ThreadsFor(per_row);
  const int64_t column_blocks = (per_row + *threads - 1) / *threads;
  if (rows > kMaxInt || column_blocks > kMaxGridY) return false;
  *grid = dim3(static_cast<unsigned>(rows), static_cast<unsigned>(column_blocks));
  return true;
}

int FlatBlocks(int64_t chunks) {
  return static_cast<int>(
      std::clamp<int64_t>((chunks + kThreads - 1) / kThreads, 1, kMaxFlatBlocks));
}

}  // namespace

template <typename T>
cudaError_t LaunchAddBias(T* y, const T* bias, int64_t n, int64_t m, cudaStream_t stream) {
  if (n < 0 || m < 0 || m > kMaxInt) return cudaErrorInvalidValue;
  if (n == 0 || m == 0) return cudaSuccess;
  const bool vector = m % kVec<T> == 0 && Aligned16(y) && Aligned16(bias);
  dim3 grid;
  int threads;
  if (!RowGrid(n, vector ? m / kVec<T> : m, &grid, &threads)) return cudaErrorInvalidValue;
  const auto kernel = vector ? AddBiasKernel<T, kVec<T>> : AddBiasKernel<T, 1>;
  return LaunchKernel(kernel, grid, threads, 0, stream, y, bias, static_cast<int>(m));
}

template <typename T>
cudaError_t LaunchAdd(T* y, const T* x, int64_t count, cudaStream_t stream) {
  if (count < 0) return cudaErrorInvalidValue;
  if (count == 0) return cudaSuccess;
  if (Aligned16(y) && Aligned16(x)) {
    return LaunchKernel(AddKernel<T, kVec<T>>, FlatBlocks(count / kVec<T>), kThreads, 0, stream, y,
                        x, count);
  }
  return LaunchKernel(AddKernel<T, 1>, FlatBlocks(count), kThreads, 0, stream, y, x, count);
}

template <typename T>
cudaError_t LaunchGatherRows(const T* x, const int32_t* rows, int64_t num_rows, int64_t dim, T* out,
                             cudaStream_t stream) {
  if (num_rows < 0 || dim < 0 || dim > kMaxInt) return cudaErrorInvalidValue;
  if (num_rows == 0 || dim == 0) return cudaSuccess;
  const bool vector = dim % kVec<T> == 0 && Aligned16(x) && Aligned16(out);
  dim3 grid;
  int threads;
  if (!RowGrid(num_rows, vector ? dim / kVec<T> : dim, &grid, &threads)) {
    return cudaErrorInvalidValue;
  }
  const auto kernel = vector ? GatherRowsKernel<T, kVec<T>> : GatherRowsKernel<T, 1>;
  return LaunchKernel(kernel, grid, threads, 0, stream, x, rows, static_cast<int>(dim), out);
}

template <typename Src, typename Dst>
cudaError_t LaunchConvert(const Src* in, int64_t count, Dst* out, cudaStream_t stream) {
  // 16 bytes of the narrower type per chunk (32 of the wider one when they differ).
  constexpr int kN = kVec<std::conditional_t<(sizeof(Src) < sizeof(Dst)), Src, Dst>>;
  if (count < 0) return cudaErrorInvalidValue;
  if (count == 0) return cudaSuccess;
  if (Aligned16(in) && Aligned16(out)) {
    return LaunchKernel(ConvertKernel<Src, Dst, kN>, FlatBlocks(count / kN), kThreads, 0, stream,
                        in, count, out);
  }
  return LaunchKernel(ConvertKernel<Src, Dst, 1>, FlatBlocks(count), kThreads, 0, stream, in, count,
                      out);
}

template <typename T>
cudaError_t LaunchUngatherVocab(const T* gathered, int tp, int64_t n, int64_t cols, int64_t vocab,
                                float* logits, cudaStream_t stream) {
  if (tp < 1 || tp > kMaxGridY || n < 0 || n > kMaxInt || cols < 0 || cols > kMaxInt || vocab < 0 ||
      vocab > tp * cols) {
    return cudaErrorInvalidValue;
  }
  if (n == 0 || vocab == 0) return cudaSuccess;
  // One load of 16 bytes of T per thread; N must divide the vocab for a chunk never to
  // straddle its end.
  const bool vector =
      cols % kVec<T> == 0 && vocab % kVec<T> == 0 && Aligned16(gathered) && Aligned16(logits);
  const int64_t per_shard = vector ? cols / kVec<T> : cols;
  const int threads = ThreadsFor(per_shard);
  const int64_t column_blocks = (per_shard + threads - 1) / threads;
  if (column_blocks > kMaxGridY) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(tp),
                  static_cast<unsigned>(column_blocks));
  const auto kernel = vector ? UngatherVocabKernel<T, kVec<T>> : UngatherVocabKernel<T, 1>;
  return LaunchKernel(kernel, grid, threads, 0, stream, gathered, n, static_cast<int>(cols), vocab,
                      logits);
}

#define TPSERVE_INSTANTIATE(T)                                                               \
  template cudaError_t LaunchAddBias(T*, const T*, int64_t, int64_t, cudaStream_t);          \
  template cudaError_t LaunchAdd(T*, const T*, int64_t, cudaStream_t);                       \
  template cudaError_t LaunchGatherRows(const T*, const int32_t*, int64_t, int64_t, T*,      \
                                        cudaStream_t);                                       \
  template cudaError_t LaunchUngatherVocab(const T*, int, int64_t, int64_t, int64_t, float*, \
                                           cudaStream_t);
TPSERVE_INSTANTIATE(float)
TPSERVE_INSTANTIATE(__nv_bfloat16)
#undef TPSERVE_INSTANTIATE

template cudaError_t LaunchConvert(const float*, int64_t, __nv_bfloat16*, cudaStream_t);
template cudaError_t LaunchConvert(const __nv_bfloat16*, int64_t, float*, cudaStream_t);
template cudaError_t LaunchConvert(const float*, int64_t, float*, cudaStream_t);
template cudaError_t LaunchConvert(const __nv_bfloat16*, int64_t, __nv_bfloat16*, cudaStream_t);

}  // namespace tpserve
