// The CTA scheduler of the CUDA emulator (emu.h), internal to it: runs a grid's CTAs one
// after another on the calling OS thread, the threads of each as fibers, and serves the
// device-side calls of emu.h (barriers, shuffles, shared memory, cp.async) for the thread
// it is running. runtime.cc calls RunGrid once it has validated a launch.
#ifndef TPSERVE_TESTING_CUDA_EMU_CTA_H_
#define TPSERVE_TESTING_CUDA_EMU_CTA_H_

#include <vector_types.h>

#include <cstddef>
#include <functional>

namespace tpserve {
namespace emu {

// body() on every thread of every CTA; returns when all have returned. Aborts, saying
// why, on a deadlock or a misused primitive.
void RunGrid(dim3 grid, dim3 block, size_t smem_bytes, const std::function<void()>& body);

}  // namespace emu
}  // namespace tpserve

#endif  // TPSERVE_TESTING_CUDA_EMU_CTA_H_
