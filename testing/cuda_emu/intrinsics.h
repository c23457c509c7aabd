// The CUDA device intrinsics and atomics that the kernels call, as host functions for the
// emulator (emu.h includes this; kernels never include it themselves). Only what the
// kernels of worker/kernels/cuda/ use is here; a kernel that calls something else fails
// to compile on the emulator, which is the cue to add it.
//
// Atomics: the threads of a CTA are fibers on one OS thread that switch only at barriers,
// and CTAs run one at a time, so a plain read-modify-write is atomic. The overloads are
// CUDA's, so argument conversions happen as they do under nvcc.
//
// Rounding: the _rn operations are the host's IEEE float operations in round-to-nearest;
// rsqrtf and __expf are the host's (a device's are within a few ulp).
#ifndef TPSERVE_TESTING_CUDA_EMU_INTRINSICS_H_
#define TPSERVE_TESTING_CUDA_EMU_INTRINSICS_H_

#include <cmath>
#include <cstring>

inline unsigned __float_as_uint(float x) {
  unsigned u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

inline float __uint_as_float(unsigned u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __int2float_rn(int i) { return static_cast<float>(i); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
// noexcept: as crt/device_functions.h declares it.
inline float __expf(float x) noexcept { return std::exp(x); }

// Rounded to nearest even and saturated as a device does: negative to 0, NaN to 2^63.
inline unsigned long long __float2ull_rn(float x) {
  if (std::isnan(x)) return 1ull << 63;
  if (x <= 0.0f) return 0;
  if (x >= 0x1p64f) return ~0ull;
  return static_cast<unsigned long long>(std::nearbyint(x));
}

inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }

namespace tpserve {
namespace emu {

// *p = op(*p), returning the old value: atomic between the emulator's threads.
template <typename T, typename Op>
T AtomicUpdate(T* p, Op op) {
  const T old = *p;
  *p = op(old);
  return old;
}

}  // namespace emu
}  // namespace tpserve

#define TPSERVE_EMU_ATOMIC(name, T, expr)                                            \
  inline T name(T* p, T v) {                                                         \
    return ::tpserve::emu::AtomicUpdate(p, [v](T old) { return static_cast<T>(expr); }); \
  }

TPSERVE_EMU_ATOMIC(atomicAdd, int, old + v)
TPSERVE_EMU_ATOMIC(atomicAdd, unsigned, old + v)
TPSERVE_EMU_ATOMIC(atomicAdd, unsigned long long, old + v)
TPSERVE_EMU_ATOMIC(atomicAdd, float, old + v)
TPSERVE_EMU_ATOMIC(atomicMin, int, v < old ? v : old)
TPSERVE_EMU_ATOMIC(atomicMin, unsigned, v < old ? v : old)
TPSERVE_EMU_ATOMIC(atomicMax, int, v > old ? v : old)
TPSERVE_EMU_ATOMIC(atomicMax, unsigned, v > old ? v : old)
TPSERVE_EMU_ATOMIC(atomicExch, int, v)
TPSERVE_EMU_ATOMIC(atomicExch, unsigned, v)

#undef TPSERVE_EMU_ATOMIC

inline int atomicCAS(int* p, int compare, int v) {
  return ::tpserve::emu::AtomicUpdate(p, [=](int old) { return old == compare ? v : old; });
}

#endif  // TPSERVE_TESTING_CUDA_EMU_INTRINSICS_H_
