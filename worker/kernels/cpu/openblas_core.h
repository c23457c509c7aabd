// OpenBLAS picks its kernels for the CPU when the library loads (Debian's build is
// DYNAMIC_ARCH). A CPU its table does not know gets the generic x86-64 fallback, the
// Prescott (SSE3) kernels: Debian 12's OpenBLAS 0.3.21 takes Intel's Emerald Rapids
// (family 6, model 207) for one, and then the attention's sgemm calls and every fp32
// linear layer run several times slower than the CPU allows (docs/perf.md). The fix is
// OpenBLAS's own: OPENBLAS_CORETYPE names the kernels to use, read when the library
// loads, which is before main; so a process that finds the fallback sets it and runs
// itself again.
#ifndef TPSERVE_WORKER_KERNELS_CPU_OPENBLAS_CORE_H_
#define TPSERVE_WORKER_KERNELS_CPU_OPENBLAS_CORE_H_

#include <string>
#include <string_view>

namespace tpserve {

// What OpenBLAS's x86-64 kernel sets need (the OS's register state included).
struct CpuVectorIsa {
  bool avx2_fma = false;
  bool avx512 = false;       // AVX512 F, CD, BW, DQ and VL: SkylakeX's kernels
  bool avx512_bf16 = false;  // and AVX512-BF16: Cooperlake's
};
CpuVectorIsa DetectCpuVectorIsa();

// The kernels OpenBLAS should run instead of `detected` (its core name) on a CPU with
// `isa`: "Cooperlake", "SkylakeX" or "Haswell" when it fell back to Prescott on a CPU
// that has their instructions; "" to keep what it chose.
std::string OpenBlasCoreFor(std::string_view detected, const CpuVectorIsa& isa);

// The kernels OpenBLAS runs in this process (openblas_get_corename()).
std::string OpenBlasCoreName();

// Call first in main() of a program that computes with OpenBLAS, before anything opens
// or reads a descriptor: when OpenBLAS fell back to generic kernels on this CPU and
// OPENBLAS_CORETYPE is unset, sets it and re-executes this program with the same
// arguments and environment (the pid, and every inherited descriptor, stay). Returns a
// line to log, or "": after such a re-execution, what was changed; when exec failed, why
// (the program then goes on with the slow kernels).
std::string UseOpenBlasKernelsForThisCpu(char** argv);

}  // namespace tpserve

#endif  // TPSERVE_WORKER_KERNELS_CPU_OPENBLAS_CORE_H_
