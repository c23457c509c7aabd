#include "worker/kernels/cpu/openblas_core.h"

#include <cblas.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace tpserve {
namespace {

// Set beside OPENBLAS_CORETYPE before re-executing: the core OpenBLAS had picked, for
// the new process to report.
constexpr const char* kReplacedCoreEnv = "TPSERVE_OPENBLAS_REPLACED_CORE";

}  // namespace

CpuVectorIsa DetectCpuVectorIsa() {
  __builtin_cpu_init();
  CpuVectorIsa isa;
  // libgcc's checks include the OS's XSAVE state (XCR0) for the AVX and AVX-512 registers.
  isa.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  isa.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512vl");
  isa.avx512_bf16 = isa.avx512 && __builtin_cpu_supports("avx512bf16");
  return isa;
}

std::string OpenBlasCoreFor(std::string_view detected, const CpuVectorIsa& isa) {
  if (detected != "Prescott") return "";
  if (isa.avx512_bf16) return "Cooperlake";
  if (isa.avx512) return "SkylakeX";
  if (isa.avx2_fma) return "Haswell";
  return "";
}

std::string OpenBlasCoreName() {
  const char* name = openblas_get_corename();
  return name == nullptr ? "" : name;
}

std::string UseOpenBlasKernelsForThisCpu(char** argv) {
  if (const char* set = std::getenv("OPENBLAS_CORETYPE")) {
    const char* replaced = std::getenv(kReplacedCoreEnv);
    if (replaced == nullptr) return "";
    std::string line = std::string("OpenBLAS took this CPU for ") + replaced +
                       " (generic kernels); running its " + OpenBlasCoreName() +
                       " kernels (OPENBLAS_CORETYPE=" + set + ")";
    unsetenv(kReplacedCoreEnv);  // not passed on to children
    return line;
  }
  const std::string detected = OpenBlasCoreName();
  const std::string core = OpenBlasCoreFor(detected, DetectCpuVectorIsa());
  if (core.empty()) return "";
  setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
  setenv(kReplacedCoreEnv, detected.c_str(), 1);
  // The binary by its path, so that the process keeps its name (exec names it after the
  // path's last part); /proc/self/exe if the file was replaced since it started.
  char path[4096];
  const ssize_t length = readlink("/proc/self/exe", path, sizeof(path) - 1);
  std::string self = "/proc/self/exe";
  if (length > 0) {
    path[length] = '\0';
    if (access(path, X_OK) == 0) self = path;
  }
  execv(self.c_str(), argv);
  const int error = errno;  // exec failed: go on as we are
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv(kReplacedCoreEnv);
  return "OpenBLAS took this CPU for " + detected + " (generic kernels); re-running with " +
         "OPENBLAS_CORETYPE=" + core + " failed (" + std::strerror(error) +
         "), so its generic kernels run";
}

}  // namespace tpserve
