// Internal to the CUDA emulator (emu.h): how its library shims (cublas.cc, nccl.cc) and
// the runtime's own async copies put host-side work on a stream, so that a capture
// records it like a kernel launch and a graph launch replays it.
#ifndef TPSERVE_TESTING_CUDA_EMU_STREAM_WORK_H_
#define TPSERVE_TESTING_CUDA_EMU_STREAM_WORK_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>

namespace tpserve {
namespace emu {

// Runs work() now, or records it when `stream` is capturing. On the legacy stream during
// a capture it runs nothing, invalidates the capture and returns
// cudaErrorStreamCaptureImplicit (also set as the last error), as a device would.
cudaError_t EnqueueStreamWork(cudaStream_t stream, std::function<void()> work);

// Whether [p, p + bytes) lies inside one cudaMalloc allocation.
bool IsDeviceMemory(const void* p, size_t bytes);

}  // namespace emu
}  // namespace tpserve

#endif  // TPSERVE_TESTING_CUDA_EMU_STREAM_WORK_H_
