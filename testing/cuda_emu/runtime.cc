// The CUDA runtime API that the kernels and their tests call, defined for the emulator
// (emu.h) in place of libcudart: a test links this and none of libcudart. Work runs
// synchronously at the launch, so streams only matter for capture; one capture at a time,
// in the semantics of cudaStreamCaptureModeGlobal.
//
// Device memory is host memory, a GuardedMemory per allocation: an access past its end
// faults at once, a write before its start aborts after the launch.
#include <cuda_runtime_api.h>

#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "testing/cuda_emu/cta.h"
#include "testing/cuda_emu/emu.h"
#include "testing/cuda_emu/guarded_memory.h"
#include "testing/cuda_emu/stream_work.h"

// The opaque handles of driver_types.h.
struct CUstream_st {
  unsigned flags = cudaStreamDefault;
  bool capturing = false;
  bool invalidated = false;  // an operation the capture forbids happened during it
  std::vector<std::function<void()>> captured;
};
struct CUgraph_st {
  std::vector<std::function<void()>> launches;
};
struct CUgraphExec_st {
  std::vector<std::function<void()>> launches;
};
// Work runs when enqueued, so an event completes when recorded: it holds the host's
// clock at that point (of a capture's replay, when captured).
struct CUevent_st {
  bool recorded = false;
  std::chrono::steady_clock::time_point at;
};

namespace tpserve {
namespace emu {
namespace {

constexpr size_t kDefaultSmem = 48 << 10;
constexpr int kMaxSmem = 227 << 10;  // sm_90's opt-in limit per CTA
constexpr size_t kAlignment = 256;   // of cudaMalloc's pointers
constexpr size_t kDefaultDeviceBytes = size_t{80} << 30;  // an H100's memory

// The emulated device's memory: TPSERVE_EMU_DEVICE_MB MiB, or kDefaultDeviceBytes. A
// small one lets a test size a KV cache from a memory fraction without allocating (and
// poisoning) tens of GiB of host memory.
size_t DeviceBytes() {
  static const size_t bytes = [] {
    const char* env = std::getenv("TPSERVE_EMU_DEVICE_MB");
    const long long mb = env != nullptr ? std::strtoll(env, nullptr, 10) : 0;
    return mb > 0 ? static_cast<size_t>(mb) << 20 : kDefaultDeviceBytes;
  }();
  return bytes;
}
// Devices a node has, so that rank r of a pool (one process each) drives device r. A
// process's allocations are its own whichever device is current.
constexpr int kDevices = 8;

struct Allocation {
  size_t bytes;  // as asked for
  std::unique_ptr<GuardedMemory> memory;
};

struct Runtime {
  cudaError_t last_error = cudaSuccess;
  int device = 0;  // cudaSetDevice's
  std::map<const void*, int> smem_limits;  // by kernel, from cudaFuncSetAttribute
  std::map<uintptr_t, Allocation> allocations;  // by start
  std::map<void*, std::unique_ptr<GuardedMemory>> host_allocations;  // cudaMallocHost's
  size_t allocated_bytes = 0;                   // device bytes, for cudaMemGetInfo
  CUstream_st* capture = nullptr;               // the stream capturing, if any
};

Runtime& State() {
  static Runtime* runtime = new Runtime;
  return *runtime;
}

cudaError_t Error(cudaError_t err) {
  State().last_error = err;
  return err;
}

bool IsLegacy(cudaStream_t s) {
  return s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread;
}

// For a call that a global-mode capture forbids: whether one is active, which the call
// then invalidates.
bool CaptureForbids() {
  if (State().capture == nullptr) return false;
  State().capture->invalidated = true;
  return true;
}

bool InDeviceMemory(const void* p, size_t bytes) {
  const auto& allocations = State().allocations;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = allocations.upper_bound(a);
  if (it == allocations.begin()) return false;
  --it;
  return a + bytes <= it->first + it->second.bytes;
}

// Whether the pointers of a copy of `bytes` are device memory where `kind` says so; says
// why not on stderr.
bool CopyMatchesKind(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                     const char* what) {
  const bool src_device = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  const bool dst_device = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  if (dst != nullptr && src != nullptr && (!src_device || InDeviceMemory(src, bytes)) &&
      (!dst_device || InDeviceMemory(dst, bytes))) {
    return true;
  }
  std::fprintf(stderr, "emu: %s of %zu bytes from %p to %p (kind %d): not device memory where "
               "the kind says so\n", what, bytes, src, dst, static_cast<int>(kind));
  return false;
}

// RunGrid, then the check that no thread wrote into the slack before an allocation.
void RunChecked(dim3 grid, dim3 block, size_t smem_bytes, const std::function<void()>& body) {
  RunGrid(grid, block, smem_bytes, body);
  for (const auto& [start, a] : State().allocations) {
    if (const size_t before = a.memory->SlackWritten(); before > 0) {
      std::fprintf(stderr, "emu: a kernel wrote %zu bytes before the device allocation of %zu "
                   "bytes at %#zx\n", before, a.bytes, static_cast<size_t>(start));
      std::abort();
    }
  }
}

}  // namespace

void LaunchGrid(const void* kernel, dim3 grid, dim3 block, size_t smem_bytes,
                cudaStream_t stream, std::function<void()> body) {
  Runtime& rt = State();
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > INT_MAX || grid.y > 65535 ||
      grid.z > 65535 || threads == 0 || threads > 1024 || block.z > 64) {
    std::fprintf(stderr, "emu: launch of grid (%u, %u, %u) x block (%u, %u, %u): invalid\n",
                 grid.x, grid.y, grid.z, block.x, block.y, block.z);
    Error(cudaErrorInvalidConfiguration);
    return;
  }
  const auto limit = rt.smem_limits.find(kernel);
  const size_t max_smem = limit == rt.smem_limits.end() ? kDefaultSmem : limit->second;
  if (smem_bytes > max_smem) {
    std::fprintf(stderr, "emu: launch with %zu bytes of dynamic shared memory, limit %zu\n",
                 smem_bytes, max_smem);
    Error(cudaErrorInvalidValue);
    return;
  }
  if (!IsLegacy(stream) && stream->capturing) {
    stream->captured.push_back(
        [=, body = std::move(body)] { RunChecked(grid, block, smem_bytes, body); });
  } else if (IsLegacy(stream) && CaptureForbids()) {
    Error(cudaErrorStreamCaptureImplicit);
  } else {
    RunChecked(grid, block, smem_bytes, body);
  }
}

cudaError_t EnqueueStreamWork(cudaStream_t stream, std::function<void()> work) {
  if (!IsLegacy(stream) && stream->capturing) {
    stream->captured.push_back(std::move(work));
  } else if (IsLegacy(stream) && CaptureForbids()) {
    return Error(cudaErrorStreamCaptureImplicit);
  } else {
    work();
  }
  return cudaSuccess;
}

bool IsDeviceMemory(const void* p, size_t bytes) { return InDeviceMemory(p, bytes); }

}  // namespace emu
}  // namespace tpserve

using tpserve::emu::CaptureForbids;
using tpserve::emu::Error;
using tpserve::emu::IsLegacy;
using tpserve::emu::State;

cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return Error(cudaErrorInvalidValue);
  *count = tpserve::emu::kDevices;
  return cudaSuccess;
}

cudaError_t cudaGetLastError() {
  const cudaError_t err = State().last_error;
  State().last_error = cudaSuccess;
  return err;
}

cudaError_t cudaPeekAtLastError() { return State().last_error; }

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  if (ptr == nullptr) return Error(cudaErrorInvalidValue);
  if (CaptureForbids()) return Error(cudaErrorStreamCaptureUnsupported);
  const size_t capacity = tpserve::emu::DeviceBytes();
  if (bytes > capacity - std::min(State().allocated_bytes, capacity)) {
    return Error(cudaErrorMemoryAllocation);  // more than the device has free
  }
  // Poisoned: uninitialised device memory reads as NaN.
  auto memory = std::make_unique<tpserve::emu::GuardedMemory>(std::max<size_t>(bytes, 1),
                                                              tpserve::emu::kAlignment);
  *ptr = memory->data();
  State().allocations[reinterpret_cast<uintptr_t>(*ptr)] = {bytes, std::move(memory)};
  State().allocated_bytes += bytes;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  if (CaptureForbids()) return Error(cudaErrorStreamCaptureUnsupported);
  const auto it = State().allocations.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == State().allocations.end()) return Error(cudaErrorInvalidValue);
  State().allocated_bytes -= it->second.bytes;
  State().allocations.erase(it);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (CaptureForbids()) return Error(cudaErrorStreamCaptureImplicit);
  if (bytes == 0) return cudaSuccess;
  if (!tpserve::emu::CopyMatchesKind(dst, src, bytes, kind, "cudaMemcpy")) {
    return Error(cudaErrorInvalidValue);
  }
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  return CaptureForbids() ? Error(cudaErrorStreamCaptureUnsupported) : cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (!IsLegacy(stream) && stream->capturing) {
    stream->invalidated = true;
    return Error(cudaErrorStreamCaptureUnsupported);
  }
  return IsLegacy(stream) && CaptureForbids() ? Error(cudaErrorStreamCaptureImplicit)
                                              : cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaSuccess;
  if (value < 0 || value > tpserve::emu::kMaxSmem) return Error(cudaErrorInvalidValue);
  State().smem_limits[func] = value;
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  if (stream == nullptr || (flags & ~cudaStreamNonBlocking) != 0) {
    return Error(cudaErrorInvalidValue);
  }
  *stream = new CUstream_st;
  (*stream)->flags = flags;
  return cudaSuccess;
}

// Work ran when it was enqueued, so a stream is always idle: a query is a synchronisation
// that never waits, with the same capture rules.
cudaError_t cudaStreamQuery(cudaStream_t stream) { return cudaStreamSynchronize(stream); }

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  if (event == nullptr) return Error(cudaErrorInvalidValue);
  *event = new CUevent_st;
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (event == nullptr) return Error(cudaErrorInvalidResourceHandle);
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (event == nullptr) return Error(cudaErrorInvalidResourceHandle);
  return tpserve::emu::EnqueueStreamWork(stream, [event] {
    event->recorded = true;
    event->at = std::chrono::steady_clock::now();
  });
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (event == nullptr) return Error(cudaErrorInvalidResourceHandle);
  return cudaSuccess;  // recorded work has run
}

// Milliseconds from `start` to `stop`, as the host's clock saw them recorded (both must
// have been).
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t stop) {
  if (ms == nullptr || start == nullptr || stop == nullptr) return Error(cudaErrorInvalidValue);
  if (!start->recorded || !stop->recorded) return Error(cudaErrorInvalidResourceHandle);
  *ms = std::chrono::duration<float, std::milli>(stop->at - start->at).count();
  return cudaSuccess;
}

// Runs fn on the host thread at the call (or at each replay of a graph that captured it):
// a stream never runs behind its host here, so a host function cannot hold it up.
cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* user_data) {
  if (fn == nullptr) return Error(cudaErrorInvalidValue);
  return tpserve::emu::EnqueueStreamWork(stream, [fn, user_data] { fn(user_data); });
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (IsLegacy(stream) || stream->capturing) return Error(cudaErrorInvalidValue);
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode) {
  if (IsLegacy(stream)) return Error(cudaErrorStreamCaptureUnsupported);
  if (State().capture != nullptr) return Error(cudaErrorIllegalState);  // one at a time
  stream->capturing = true;
  stream->invalidated = false;
  stream->captured.clear();
  State().capture = stream;
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  if (IsLegacy(stream) || !stream->capturing) return Error(cudaErrorIllegalState);
  stream->capturing = false;
  State().capture = nullptr;
  if (stream->invalidated) {
    *graph = nullptr;
    return Error(cudaErrorStreamCaptureInvalidated);
  }
  *graph = new CUgraph_st{std::move(stream->captured)};
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  if (graph == nullptr) return Error(cudaErrorInvalidValue);
  *exec = new CUgraphExec_st{graph->launches};
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  if (exec == nullptr) return Error(cudaErrorInvalidValue);
  if (IsLegacy(stream) && CaptureForbids()) return Error(cudaErrorStreamCaptureImplicit);
  for (const std::function<void()>& launch : exec->launches) launch();
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}

// --- Errors, the device, host memory, async copies: what the model stack calls. ---

const char* cudaGetErrorName(cudaError_t err) {
  switch (err) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalState: return "cudaErrorIllegalState";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureImplicit: return "cudaErrorStreamCaptureImplicit";
    default: return "cudaErrorUnknown (emulated)";
  }
}

const char* cudaGetErrorString(cudaError_t err) {
  return err == cudaSuccess ? "no error" : "an error of the CUDA emulator (see its stderr)";
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= tpserve::emu::kDevices) return Error(cudaErrorInvalidDevice);
  State().device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return Error(cudaErrorInvalidValue);
  *device = State().device;
  return cudaSuccess;
}

// The device's memory, less what is allocated.
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  if (free_bytes == nullptr || total_bytes == nullptr) return Error(cudaErrorInvalidValue);
  *total_bytes = tpserve::emu::DeviceBytes();
  *free_bytes = *total_bytes - std::min(State().allocated_bytes, *total_bytes);
  return cudaSuccess;
}

// Host memory, guarded like device memory but never taken for it by a copy's kind check.
cudaError_t cudaMallocHost(void** ptr, size_t bytes) {
  if (ptr == nullptr) return Error(cudaErrorInvalidValue);
  if (CaptureForbids()) return Error(cudaErrorStreamCaptureUnsupported);
  auto memory = std::make_unique<tpserve::emu::GuardedMemory>(std::max<size_t>(bytes, 1),
                                                              tpserve::emu::kAlignment);
  *ptr = memory->data();
  State().host_allocations[*ptr] = std::move(memory);
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  if (CaptureForbids()) return Error(cudaErrorStreamCaptureUnsupported);
  if (State().host_allocations.erase(ptr) == 0) return Error(cudaErrorInvalidValue);
  return cudaSuccess;
}

cudaError_t cudaMemset(void* ptr, int value, size_t bytes) {
  return cudaMemsetAsync(ptr, value, bytes, nullptr);
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  if (!tpserve::emu::InDeviceMemory(ptr, bytes)) {
    std::fprintf(stderr, "emu: cudaMemset of %zu bytes at %p: not device memory\n", bytes, ptr);
    return Error(cudaErrorInvalidValue);
  }
  return tpserve::emu::EnqueueStreamWork(stream, [=] { std::memset(ptr, value, bytes); });
}

// Pageable or pinned host memory alike; the copy happens at the call (or at each replay
// of a graph that captured it).
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  if (!tpserve::emu::CopyMatchesKind(dst, src, bytes, kind, "cudaMemcpyAsync")) {
    return Error(cudaErrorInvalidValue);
  }
  return tpserve::emu::EnqueueStreamWork(stream, [=] { std::memmove(dst, src, bytes); });
}
