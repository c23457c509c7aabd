// Paged attention on the GPU: time per launch and achieved bandwidth (decode) or FLOP rate
// (prefill) for an 8B Llama's heads in bf16 (32 q heads, 8 kv heads, d = 128, block 16),
// against the device-to-device copy bandwidth measured in the same run.
// Usage: paged_attention_benchmark (exits 0 without a device).
#include <cuda_bf16.h>
#include <cuda_runtime.h>  // the typed cudaMalloc

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "worker/kernels/cuda/paged_attention.h"

namespace tpserve {
namespace {

constexpr int kHeads = 32, kKvHeads = 8, kDim = 128, kBlock = 16, kIters = 50;
using T = __nv_bfloat16;

#define CHECK_CUDA(expr)                                                \
  do {                                                                  \
    const cudaError_t err = (expr);                                     \
    if (err != cudaSuccess) {                                           \
      std::fprintf(stderr, "%s: %s\n", #expr, cudaGetErrorString(err)); \
      return false;                                                     \
    }                                                                   \
  } while (0)

// Microseconds per call of `launch`, averaged over kIters after one warm-up call.
template <typename F>
bool TimeUs(F launch, float* us) {
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  CHECK_CUDA(launch());
  CHECK_CUDA(cudaEventRecord(start));
  for (int i = 0; i < kIters; ++i) CHECK_CUDA(launch());
  CHECK_CUDA(cudaEventRecord(stop));
  CHECK_CUDA(cudaEventSynchronize(stop));
  float ms = 0;
  CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
  *us = ms * 1000 / kIters;
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return true;
}

// Device-to-device copy bandwidth (read + write bytes per second) of a 1 GiB buffer.
bool CopyBandwidth(double* bytes_per_s) {
  const size_t n = size_t{1} << 30;
  void *a, *b;
  CHECK_CUDA(cudaMalloc(&a, n));
  CHECK_CUDA(cudaMalloc(&b, n));
  float us = 0;
  if (!TimeUs([&] { return cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice); }, &us)) {
    return false;
  }
  *bytes_per_s = 2.0 * n / (us * 1e-6);
  cudaFree(a);
  cudaFree(b);
  return true;
}

// `num_seqs` sequences of `new_tokens` new tokens at `context` tokens, scattered blocks.
bool Run(int num_seqs, int new_tokens, int context, double copy_bw) {
  const int blocks_per_seq = (context + kBlock - 1) / kBlock;
  const int num_blocks = num_seqs * blocks_per_seq;
  const int num_tokens = num_seqs * new_tokens;
  std::vector<int32_t> tables(num_blocks), query_start(num_seqs + 1),
      context_lens(num_seqs, context);
  std::iota(tables.begin(), tables.end(), 0);
  std::shuffle(tables.begin(), tables.end(), std::mt19937(1));
  for (int s = 0; s <= num_seqs; ++s) query_start[s] = s * new_tokens;

  const size_t kv_elems = static_cast<size_t>(num_blocks) * kBlock * kKvHeads * kDim;
  const int64_t qkv_width = int64_t{kHeads + 2 * kKvHeads} * kDim;
  T *k, *v, *qkv, *out;
  int32_t *d_tables, *d_query_start, *d_context_lens;
  CHECK_CUDA(cudaMalloc(&k, kv_elems * sizeof(T)));
  CHECK_CUDA(cudaMalloc(&v, kv_elems * sizeof(T)));
  CHECK_CUDA(cudaMalloc(&qkv, num_tokens * qkv_width * sizeof(T)));
  CHECK_CUDA(cudaMalloc(&out, int64_t{num_tokens} * kHeads * kDim * sizeof(T)));
  CHECK_CUDA(cudaMemset(k, 0, kv_elems * sizeof(T)));  // bf16 zeros: finite scores
  CHECK_CUDA(cudaMemset(v, 0, kv_elems * sizeof(T)));
  CHECK_CUDA(cudaMemset(qkv, 0, num_tokens * qkv_width * sizeof(T)));
  CHECK_CUDA(cudaMalloc(&d_tables, tables.size() * 4));
  CHECK_CUDA(cudaMalloc(&d_query_start, query_start.size() * 4));
  CHECK_CUDA(cudaMalloc(&d_context_lens, context_lens.size() * 4));
  CHECK_CUDA(cudaMemcpy(d_tables, tables.data(), tables.size() * 4, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(d_query_start, query_start.data(), query_start.size() * 4,
                        cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(d_context_lens, context_lens.data(), context_lens.size() * 4,
                        cudaMemcpyHostToDevice));

  const AttentionMetadata meta{d_query_start, d_context_lens, d_tables,   num_seqs,
                               num_tokens,    blocks_per_seq, new_tokens, context};
  const size_t ws_bytes = PagedAttentionWorkspaceBytes(meta, kHeads, kKvHeads, kDim, kDim);
  float* workspace = nullptr;
  if (ws_bytes > 0) CHECK_CUDA(cudaMalloc(&workspace, ws_bytes));
  float us = 0;
  if (!TimeUs(
          [&] {
            return LaunchPagedAttention<T>(qkv, qkv_width, k, v, meta, kBlock, kHeads, kKvHeads,
                                           kDim, kDim, 0.088f, 0, out, workspace, nullptr);
          },
          &us)) {
    return false;
  }
  const double kv_bytes = 2.0 * num_seqs * context * kKvHeads * kDim * sizeof(T);
  const double flops =
      4.0 * kHeads * kDim * num_seqs * new_tokens * (context - (new_tokens - 1) / 2.0);
  std::printf(
      "seqs %3d  new %5d  context %5d  splits %s  %8.1f us  %7.1f GB/s of K+V (%4.0f%% of copy)  "
      "%6.2f TFLOP/s\n",
      num_seqs, new_tokens, context, ws_bytes > 0 ? "yes" : "no ", us, kv_bytes / us * 1e-3,
      100 * kv_bytes / (us * 1e-6) / copy_bw, flops / us * 1e-6);
  for (void* p :
       {static_cast<void*>(k), static_cast<void*>(v), static_cast<void*>(qkv),
        static_cast<void*>(out), static_cast<void*>(d_tables), static_cast<void*>(d_query_start),
        static_cast<void*>(d_context_lens), static_cast<void*>(workspace)}) {
    cudaFree(p);
  }
  return true;
}

}  // namespace
}  // namespace tpserve

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device\n");
    return 0;
  }
  double copy_bw = 0;
  if (!tpserve::CopyBandwidth(&copy_bw)) return 1;
  std::printf("device-to-device copy: %.0f GB/s (read + write)\n", copy_bw * 1e-9);
  for (int seqs : {1, 8, 64, 256}) {
    for (int context : {1024, 3000, 8192}) {
      if (!tpserve::Run(seqs, 1, context, copy_bw)) return 1;
    }
  }
  if (!tpserve::Run(1, 2048, 2048, copy_bw)) return 1;  // a prompt, causal
  if (!tpserve::Run(4, 512, 4096, copy_bw)) return 1;   // prefill chunks over a prefix
  return 0;
}
