// UseOpenBlasKernelsForThisCpu runs first in main(), as in the programs that call it; the
// tests then check the process it left (re-executed, where OpenBLAS fell back).
#include "worker/kernels/cpu/openblas_core.h"

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

std::string* note = nullptr;  // what UseOpenBlasKernelsForThisCpu returned

TEST(OpenBlasCoreTest, ReplacesOnlyThePrescottFallback) {
  const CpuVectorIsa none, avx2{true, false, false}, avx512{true, true, false},
      bf16{true, true, true};
  EXPECT_EQ(OpenBlasCoreFor("Prescott", bf16), "Cooperlake");
  EXPECT_EQ(OpenBlasCoreFor("Prescott", avx512), "SkylakeX");
  EXPECT_EQ(OpenBlasCoreFor("Prescott", avx2), "Haswell");
  EXPECT_EQ(OpenBlasCoreFor("Prescott", none), "");  // Prescott is right for such a CPU
  for (const char* known : {"Haswell", "SkylakeX", "Cooperlake", "Zen", "Nehalem"}) {
    EXPECT_EQ(OpenBlasCoreFor(known, bf16), "") << known;
  }
}

// On a CPU with AVX2 and FMA, the process runs kernels that use them, whether OpenBLAS
// knew the CPU (nothing to do) or not (re-executed with OPENBLAS_CORETYPE).
TEST(OpenBlasCoreTest, ThisProcessRunsKernelsForItsCpu) {
  const CpuVectorIsa isa = DetectCpuVectorIsa();
  const std::string core = OpenBlasCoreName();
  EXPECT_FALSE(core.empty());
  if (isa.avx2_fma) { EXPECT_NE(core, "Prescott") << *note; }
  if (!note->empty()) {
    EXPECT_NE(note->find(core), std::string::npos) << *note;
    ASSERT_NE(std::getenv("OPENBLAS_CORETYPE"), nullptr);
    EXPECT_EQ(std::getenv("TPSERVE_OPENBLAS_REPLACED_CORE"), nullptr);  // not inherited
  }
  std::printf("OpenBLAS core: %s%s%s\n", core.c_str(), note->empty() ? "" : "; ",
              note->c_str());
}

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) {
  tpserve::note = new std::string(tpserve::UseOpenBlasKernelsForThisCpu(argv));
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
