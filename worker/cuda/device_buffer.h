// DeviceBuffer: an owned, untyped allocation of GPU memory (cudaMalloc / cudaFree).
//
// Move-only. Created and freed on the thread that owns the rank's CUDA device; the
// copies are synchronous (they wait for the default stream) and meant for loading and
// tests, not the step loop, which uses the async kernels on its own stream.
#ifndef TPSERVE_WORKER_CUDA_DEVICE_BUFFER_H_
#define TPSERVE_WORKER_CUDA_DEVICE_BUFFER_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tpserve {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // A buffer of `bytes` bytes (contents undefined); RESOURCE_EXHAUSTED when the device
  // is out of memory, INTERNAL for any other CUDA error.
  static absl::StatusOr<DeviceBuffer> Create(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t bytes() const { return bytes_; }

  // Copies `bytes` bytes from host `src` to the buffer at byte `offset`.
  absl::Status CopyFromHost(const void* src, size_t bytes, size_t offset = 0);
  // Copies `bytes` bytes from the buffer at byte `offset` to host `dst`.
  absl::Status CopyToHost(void* dst, size_t bytes, size_t offset = 0) const;
  // Sets every byte to `value`.
  absl::Status Fill(uint8_t value);

 private:
  DeviceBuffer(void* data, size_t bytes) : data_(data), bytes_(bytes) {}
  void Release();
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace tpserve

#endif  // TPSERVE_WORKER_CUDA_DEVICE_BUFFER_H_
