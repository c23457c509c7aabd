// A CPU emulator of the CUDA the kernels of worker/kernels/cuda/ use, so that their real
// sources and their real tests run without a GPU, in CI. The .cu files are compiled as
// C++ with -DTPSERVE_CUDA_EMULATOR (cuda_emulated_library in bazel/cuda.bzl); three seams
// route them here: TPSERVE_DYNAMIC_SMEM (vec.cuh), LaunchKernel (launch.cuh) and the
// cp.async helpers (paged_attention_primitives.cuh). The tests link the emulated runtime
// (runtime.cc) instead of libcudart and run unchanged.
//
// What it models:
//  - Threads: each thread of a CTA is a fiber with its own stack (fiber.h). A thread runs
//    until it waits at a barrier, then the next one runs; CTAs run one after another,
//    deterministically. Neighbouring CTAs (by the parity of blockIdx.x + y + z) sweep
//    their threads in ascending and in descending order, so a shared-memory read that no
//    barrier separates from another thread's write sees the stale value in one of them.
//  - Barriers: __syncthreads, __syncwarp, __ballot_sync, and the warp shuffles
//    __shfl_sync, __shfl_xor_sync and __shfl_up_sync (any type of 4 or 8 bytes, full warp
//    masks only). A barrier that some thread never reaches (divergent code, an early
//    return) aborts as a deadlock.
//  - Dynamic shared memory (TPSERVE_DYNAMIC_SMEM): exactly the launch's bytes (rounded to
//    16), poisoned with 0xFF bytes (NaN in fp32 and bf16) for every CTA, followed by an
//    inaccessible page (guarded_memory.h): a read or write past its end faults. A static
//    __shared__ variable is a function-local static, one object per OS thread: since CTAs
//    run one at a time, it is the running CTA's. TPSERVE_SHARED_POISON(var) (vec.cuh),
//    which every declaration in the kernels is followed by (shared_poison_test checks),
//    poisons it with 0xFF bytes once per CTA, when the CTA's first thread passes it.
//  - Atomics and the intrinsics the kernels call (intrinsics.h): atomic because threads
//    switch only at barriers.
//  - cp.async (CopyAsync16, CommitCopies, WaitCopies): a copy lands only when its thread
//    waits for its committed group, so a missing wait or commit leaves stale shared memory.
//    A misaligned copy, one outside the dynamic shared memory, and a thread exiting with
//    copies it never waited for abort.
//  - Alignment of wide accesses: the kernels' vector loads and stores (LoadVec, StoreVec
//    in vec.cuh) abort unless aligned to their size, as a device faults.
//  - Launches (LaunchKernel): grid and block limits, and dynamic shared memory against
//    48 KiB or the kernel's cudaFuncSetAttribute limit (at most sm_90's 227 KiB); a bad
//    configuration is the launch's error, as on a device.
//  - The runtime API the kernels and tests call (runtime.cc): device memory is host memory,
//    poisoned with 0xFF when allocated and guarded like shared memory (an access past an
//    allocation faults, a write before it aborts after the launch); cudaMemcpy checks that
//    its kind matches the pointers. Stream capture records launches with their arguments
//    copied, and a graph launch replays them; allocating, copying or synchronising during
//    a capture fails and invalidates it, as CUDA's global mode does.
//  - Devices: eight ordinals for cudaSetDevice, so that rank r of a pool (a process each)
//    drives device r; a process's allocations are its own, whichever device is current.
//    Each has 80 GiB (TPSERVE_EMU_DEVICE_MB sets another size); cudaMalloc past what is
//    free fails, and cudaMemGetInfo counts what the process allocated.
//  - cuBLAS and NCCL through shims (cublas.cc, nccl.cc), NCCL for 1 to 8 ranks that are
//    processes of this host, meeting in shared memory, with failures of a peer (exit,
//    abort, never arriving) turned into the waiting rank's async error.
// What it does not:
//  - No memory model: nothing is ordered but by the barriers above, and a race between
//    CTAs never shows (they run one at a time), nor one between atomics; no warp in lockstep
//    without a __syncwarp, no bank conflicts. Global accesses are checked only at the
//    edges of allocations: a wild index that lands in another allocation goes unseen.
//  - No PTX: code under __CUDA_ARCH__ never compiles here, so mma.cuh runs its shuffle
//    fallback instead of tensor-core MMAs (it computes the fragment layout mma.cuh
//    documents; that mma.sync agrees with it, and the cp.async asm, only a device checks).
//  - Host float math: exp2f and friends round as the host's libm does, no fast-math
//    intrinsics. __launch_bounds__, registers and occupancy are ignored; timing means
//    nothing.
// Threading: one host thread drives the runtime; launches run synchronously on it.
#ifndef TPSERVE_TESTING_CUDA_EMU_EMU_H_
#define TPSERVE_TESTING_CUDA_EMU_EMU_H_

#include <cuda_runtime.h>  // what nvcc includes in every .cu
#include <vector_types.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

#include "testing/cuda_emu/intrinsics.h"

// CUDA's execution-space keywords mean nothing to a host compiler.
#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif
#undef __shared__
#define __shared__ static thread_local

namespace tpserve {
namespace emu {

// The calling CUDA thread's view; each aborts outside a kernel.
unsigned char* DynamicSmem();
void SyncThreads();
void SyncWarp(unsigned mask);
int LaneId();
uint64_t ShuffleBits(unsigned mask, uint64_t bits, int src_lane);  // src_lane's bits
unsigned Ballot(unsigned mask, bool predicate);  // bit i: lane i's predicate
void CopyAsync16(void* smem, const void* global, bool valid);
void CommitCopies();
void WaitCopies(int max_pending);
// Aborts, naming the thread, unless p is a multiple of `bytes`: a device faults on a wide
// load or store that is not aligned to its size (cudaErrorMisalignedAddress), which x86
// forgives. LoadVec and StoreVec (vec.cuh) call it.
void CheckAligned(const void* p, size_t bytes, const char* access);
// Fills the static __shared__ object [p, p + bytes) with 0xFF bytes unless the running CTA
// already has: what a CTA reads there before writing it is what it wrote, or NaN.
void PoisonStaticShared(void* p, size_t bytes);

// Validates the launch, then runs body() on every thread of the grid, or records it when
// `stream` is capturing. `kernel` identifies the kernel for cudaFuncSetAttribute.
void LaunchGrid(const void* kernel, dim3 grid, dim3 block, size_t smem_bytes,
                cudaStream_t stream, std::function<void()> body);

template <typename... Params, typename... Args>
void Launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes,
            cudaStream_t stream, Args&&... args) {
  // Converted to the kernel's parameter types and copied now, as a launch does.
  const auto params =
      std::make_shared<const std::tuple<std::decay_t<Params>...>>(std::forward<Args>(args)...);
  LaunchGrid(reinterpret_cast<const void*>(kernel), grid, block, smem_bytes, stream,
             [kernel, params] { std::apply(kernel, *params); });
}

template <typename T>
uint64_t ToBits(T v) {
  static_assert(std::is_trivially_copyable_v<T> && (sizeof(T) == 4 || sizeof(T) == 8));
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  return bits;
}

template <typename T>
T FromBits(uint64_t bits) {
  T v;
  std::memcpy(&v, &bits, sizeof(T));
  return v;
}

}  // namespace emu
}  // namespace tpserve

// The built-in variables, set by the CTA scheduler for the thread it runs.
inline thread_local uint3 threadIdx;
inline thread_local uint3 blockIdx;
inline thread_local dim3 blockDim;
inline thread_local dim3 gridDim;

using std::isfinite;
using std::isinf;
using std::isnan;
using std::max;
using std::min;

// The typed overload that cuda_runtime.h declares only when nvcc compiles.
template <typename T>
cudaError_t cudaFuncSetAttribute(T* kernel, cudaFuncAttribute attr, int value) {
  return cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), attr, value);
}

inline void __syncthreads() { tpserve::emu::SyncThreads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { tpserve::emu::SyncWarp(mask); }

template <typename T>
T __shfl_sync(unsigned mask, T v, int src_lane) {
  return tpserve::emu::FromBits<T>(tpserve::emu::ShuffleBits(mask, tpserve::emu::ToBits(v),
                                                              src_lane & 31));
}

template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask) {
  return __shfl_sync(mask, v, tpserve::emu::LaneId() ^ lane_mask);
}

template <typename T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta) {
  const int lane = tpserve::emu::LaneId(), src = lane - static_cast<int>(delta);
  return __shfl_sync(mask, v, src >= 0 ? src : lane);
}

inline unsigned __ballot_sync(unsigned mask, int predicate) {
  return tpserve::emu::Ballot(mask, predicate != 0);
}

#endif  // TPSERVE_TESTING_CUDA_EMU_EMU_H_
