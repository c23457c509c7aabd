// Test support for bf16_gemm: checks MatMulBf16 against the plain reference
// (MatMulTransBReference on the bf16-rounded x and weight), for the unit test and the
// lower-ISA test alike. Reports through gtest; call from a test body.
#ifndef TPSERVE_WORKER_KERNELS_CPU_BF16_GEMM_TESTING_H_
#define TPSERVE_WORKER_KERNELS_CPU_BF16_GEMM_TESTING_H_

#include <cstdint>
#include <vector>

#include "worker/kernels/cpu/bf16_gemm.h"

namespace tpserve {

// The rows of M that decode (1..64) and prefill (200, 2048) produce, with chunk tails.
inline constexpr int64_t kTestRowCounts[] = {1, 2, 7, 8, 32, 64, 200, 2048};

// A random normal [n_out, k] weight packed with FromFloat; `w_rounded` (if set) receives
// its bf16-rounded values as floats, [n_out, k].
PackedBf16Weight RandomWeight(int64_t n_out, int64_t k, uint32_t seed,
                              std::vector<float>* w_rounded);

// Runs MatMulBf16 for a random x: [m, k] (and random initial y if accumulate) with guard
// regions around y, and compares up to `max_checked_rows` rows of y (spread over m,
// always the first and last) with the reference. Per element the tolerance is
// 4·sqrt(k)·2⁻²⁴·(Σ|x̂·ŵ| + |y₀|): fp32 summation of exact bf16 products, whose
// rounding error grows like sqrt(k) units of fp32 roundoff for random data.
void ExpectMatchesReference(const PackedBf16Weight& w, const std::vector<float>& w_rounded,
                            int64_t m, bool accumulate, uint32_t seed,
                            int64_t max_checked_rows = 1 << 30);

}  // namespace tpserve

#endif  // TPSERVE_WORKER_KERNELS_CPU_BF16_GEMM_TESTING_H_
