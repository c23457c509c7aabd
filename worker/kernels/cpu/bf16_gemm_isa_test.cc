// bf16_gemm on a CPU without AVX512-BF16, emulated by capping oneDNN's ISA with
// --max_isa (avx2 or avx512_core) before anything creates a primitive: hence its own
// binary. The weight must stay bf16 and the results match the same reference.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "worker/kernels/cpu/bf16_gemm.h"
#include "worker/kernels/cpu/bf16_gemm_testing.h"

namespace tpserve {
namespace {

dnnl::cpu_isa requested_isa = dnnl::cpu_isa::all;

// Whether this CPU has what oneDNN's `isa` needs: a cap above the CPU leaves oneDNN at
// the CPU's own best.
bool CpuReaches(dnnl::cpu_isa isa) {
  if (isa == dnnl::cpu_isa::avx2) return __builtin_cpu_supports("avx2");
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}

TEST(Bf16GemmIsaTest, OneDnnRunsAtTheRequestedIsa) {
  if (!CpuReaches(requested_isa)) GTEST_SKIP() << "this CPU cannot run the requested ISA";
  EXPECT_EQ(dnnl::get_effective_cpu_isa(), requested_isa);
}

TEST(Bf16GemmIsaTest, FallsBackToTheAvx2KernelInBf16) {
  PackedBf16Weight w = RandomWeight(67, 129, 1, nullptr);
  EXPECT_FALSE(w.packed_for_onednn());
  EXPECT_EQ(w.bytes(), 80 * 130 * sizeof(uint16_t));  // 16-row blocks, column pairs
}

TEST(Bf16GemmIsaTest, MatchesReference) {
  for (auto [n_out, k] : {std::pair<int64_t, int64_t>{3, 5}, {67, 129}, {517, 1031}, {5632, 2048}}) {
    std::vector<float> w_rounded;
    PackedBf16Weight w = RandomWeight(n_out, k, 2, &w_rounded);
    for (int64_t m : kTestRowCounts) {
      for (bool accumulate : {false, true}) {
        ExpectMatchesReference(w, w_rounded, m, accumulate, 3, /*max_checked_rows=*/3);
      }
    }
  }
}

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--max_isa=avx2") == 0) {
      tpserve::requested_isa = dnnl::cpu_isa::avx2;
    } else if (std::strcmp(argv[i], "--max_isa=avx512_core") == 0) {
      tpserve::requested_isa = dnnl::cpu_isa::avx512_core;
    } else {
      std::fprintf(stderr, "usage: %s --max_isa=avx2|avx512_core [gtest flags]\n", argv[0]);
      return 2;
    }
  }
  if (tpserve::requested_isa == dnnl::cpu_isa::all) {
    std::fprintf(stderr, "--max_isa is required\n");
    return 2;
  }
  dnnl::set_max_cpu_isa(tpserve::requested_isa);
  return RUN_ALL_TESTS();
}
