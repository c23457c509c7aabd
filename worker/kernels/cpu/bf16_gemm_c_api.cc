// A C interface to MatMulBf16 for benchmarks that run in another process's language:
// tools/peer_gemm.py loads it (ctypes) into vLLM's Python and times tpserve's bf16 GEMM
// beside vLLM's oneDNN call in one process, the calls alternating, so that both meet the
// same moments of a shared host.
//
//   bazel build -c opt //worker/kernels/cpu:libtpserve_bf16_gemm.so
//
// Not a serving interface: errors are returned as -1 with the message on stderr.
#include <cstdint>
#include <cstdio>
#include <vector>

#include "worker/kernels/cpu/bf16_gemm.h"

namespace {

// `copies` packings of one weight, so that each call can read its weight from memory.
struct Weights {
  std::vector<tpserve::PackedBf16Weight> copies;
};

}  // namespace

extern "C" {

// Packs w ([n_out, k] bf16 bits, HF's order) `copies` times; null on failure.
void* tpserve_bf16_gemm_new(const uint16_t* w, int64_t n_out, int64_t k, int32_t copies) {
  if (copies < 1) {
    std::fprintf(stderr, "tpserve_bf16_gemm_new: copies must be at least 1, got %d\n", copies);
    return nullptr;
  }
  auto* weights = new Weights;
  for (int32_t i = 0; i < copies; ++i) {
    absl::StatusOr<tpserve::PackedBf16Weight> packed =
        tpserve::PackedBf16Weight::FromBf16(w, n_out, k);
    if (!packed.ok()) {
      std::fprintf(stderr, "tpserve_bf16_gemm_new: %s\n", packed.status().ToString().c_str());
      delete weights;
      return nullptr;
    }
    weights->copies.push_back(*std::move(packed));
  }
  return weights;
}

void tpserve_bf16_gemm_free(void* weights) { delete static_cast<Weights*>(weights); }

// The team of threads MatMulBf16 runs on (SetBf16GemmThreads).
void tpserve_bf16_gemm_threads(int32_t threads) { tpserve::SetBf16GemmThreads(threads); }

// y [m, n_out] = x [m, k] · wᵀ on packing `copy`, fp32 in and out; 0, or -1 on failure.
int32_t tpserve_bf16_gemm_run(void* weights, int32_t copy, const float* x, int64_t m,
                              float* y) {
  auto* w = static_cast<Weights*>(weights);
  if (w == nullptr || copy < 0 || copy >= static_cast<int32_t>(w->copies.size())) {
    std::fprintf(stderr, "tpserve_bf16_gemm_run: no copy %d\n", copy);
    return -1;
  }
  const absl::Status status = tpserve::MatMulBf16(x, m, w->copies[copy], y, false);
  if (!status.ok()) {
    std::fprintf(stderr, "tpserve_bf16_gemm_run: %s\n", status.ToString().c_str());
    return -1;
  }
  return 0;
}

}  // extern "C"
