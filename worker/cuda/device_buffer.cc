#include "worker/cuda/device_buffer.h"

#include <cuda_runtime_api.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "worker/cuda/cuda_status.h"

namespace tpserve {

absl::StatusOr<DeviceBuffer> DeviceBuffer::Create(size_t bytes) {
  if (bytes == 0) return DeviceBuffer();
  void* data = nullptr;
  const cudaError_t err = cudaMalloc(&data, bytes);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear the sticky-free error so later calls are unaffected
    return absl::ResourceExhaustedError(
        absl::StrCat("cudaMalloc of ", bytes, " bytes: out of device memory"));
  }
  TPSERVE_CUDA_RETURN_IF_ERROR(err);
  return DeviceBuffer(data, bytes);
}

DeviceBuffer::~DeviceBuffer() { Release(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::Release() {
  if (data_ != nullptr) cudaFree(data_);
  data_ = nullptr;
  bytes_ = 0;
}

namespace {

absl::Status CheckRange(size_t offset, size_t bytes, size_t size, const char* what) {
  if (offset > size || bytes > size - offset) {
    return absl::OutOfRangeError(absl::StrCat(what, ": bytes [", offset, ", ", offset + bytes,
                                              ") outside a buffer of ", size));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status DeviceBuffer::CopyFromHost(const void* src, size_t bytes, size_t offset) {
  TPSERVE_RETURN_IF_ERROR(CheckRange(offset, bytes, bytes_, "CopyFromHost"));
  if (bytes == 0) return absl::OkStatus();
  TPSERVE_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(static_cast<char*>(data_) + offset, src, bytes, cudaMemcpyHostToDevice));
  return absl::OkStatus();
}

absl::Status DeviceBuffer::CopyToHost(void* dst, size_t bytes, size_t offset) const {
  TPSERVE_RETURN_IF_ERROR(CheckRange(offset, bytes, bytes_, "CopyToHost"));
  if (bytes == 0) return absl::OkStatus();
  TPSERVE_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(dst, static_cast<const char*>(data_) + offset, bytes, cudaMemcpyDeviceToHost));
  return absl::OkStatus();
}

absl::Status DeviceBuffer::Fill(uint8_t value) {
  if (bytes_ == 0) return absl::OkStatus();
  TPSERVE_CUDA_RETURN_IF_ERROR(cudaMemset(data_, value, bytes_));
  return absl::OkStatus();
}

}  // namespace tpserve
