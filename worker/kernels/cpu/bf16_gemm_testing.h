// Test support for the packed-weight GEMMs: checks MatMulBf16 and MatMulInt8 against
// the plain reference (MatMulTransBReference on x rounded as the kernel rounds it and
// the weight's held values), for the unit tests and the lower-ISA test alike. Reports through gtest; call
// from a test body.
#ifndef TPSERVE_WORKER_KERNELS_CPU_BF16_GEMM_TESTING_H_
#define TPSERVE_WORKER_KERNELS_CPU_BF16_GEMM_TESTING_H_

#include <cstdint>
#include <vector>

#include "worker/kernels/cpu/bf16_gemm.h"
#include "worker/kernels/cpu/packed_weight.h"

namespace tpserve {

// The rows of M that decode (1..64) and prefill (200, 2048) produce, with chunk tails.
inline constexpr int64_t kTestRowCounts[] = {1, 2, 7, 8, 32, 64, 200, 2048};

// `count` standard normal floats from `seed`.
std::vector<float> RandomNormal(int64_t count, uint32_t seed);

// A random normal [n_out, k] weight packed with FromFloat; `w_rounded` (if set) receives
// its bf16-rounded values as floats, [n_out, k].
PackedBf16Weight RandomWeight(int64_t n_out, int64_t k, uint32_t seed,
                              std::vector<float>* w_rounded);

// The values of a row of x ([k]) a kernel multiplies by, into `held` ([k]).
using RoundXRow = void (*)(const float* x, int64_t k, float* held);

// Runs w.MatMul (bf16 or int8 alike) for a random x: [m, k] (and a random initial y if
// accumulate) with guard regions around y, and compares up to `max_checked_rows` rows of
// y (spread over m, always the first and last) with the reference, which multiplies x
// rounded as the kernel does (`round_x`; nullptr: to bf16, as MatMulBf16) by
// `w_rounded`: the values the weight holds ([n_out, k]; for int8, q·scale). Per element
// the tolerance is 4·sqrt(k)·2⁻²⁴·(Σ|x̂·ŵ| + |y₀|): fp32 summation of exact products,
// whose rounding error grows like sqrt(k) units of fp32 roundoff for random data.
void ExpectMatchesReference(const PackedWeight& w, const std::vector<float>& w_rounded,
                            int64_t m, bool accumulate, uint32_t seed,
                            int64_t max_checked_rows = 1 << 30, RoundXRow round_x = nullptr);

}  // namespace tpserve

#endif  // TPSERVE_WORKER_KERNELS_CPU_BF16_GEMM_TESTING_H_
