// DeviceUploader: host fp32 arrays into device float or bf16 arrays, through two pinned
// staging buffers, so that converting one chunk overlaps the copy of the one before and
// nothing is allocated per array. Loading a model sends every weight through one: a
// pageable cudaMemcpy per tensor stages through the driver's own buffers instead, and
// converting to bf16 needed a host copy of each tensor.
//
// Copies run on the uploader's own stream; Finish() (or destruction) waits for them, so
// work on other streams must not read the destinations before Finish returns. One thread
// (the rank's, with its device current).
#ifndef TPSERVE_WORKER_CUDA_DEVICE_UPLOADER_H_
#define TPSERVE_WORKER_CUDA_DEVICE_UPLOADER_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/cuda/device_dtype.h"
#include "worker/cuda/pinned_buffer.h"

namespace tpserve {

class DeviceUploader {
 public:
  static constexpr size_t kDefaultChunkBytes = size_t{16} << 20;

  // chunk_bytes: the size of each of the two staging buffers (a multiple of 4, ≥ 4).
  static absl::StatusOr<std::unique_ptr<DeviceUploader>> Create(
      size_t chunk_bytes = kDefaultChunkBytes);
  ~DeviceUploader();
  DeviceUploader(const DeviceUploader&) = delete;
  DeviceUploader& operator=(const DeviceUploader&) = delete;

  // Enqueues dst[0, count) = src[0, count) as `dtype` (bf16: rounded to nearest even).
  // src may be reused once this returns; dst (device memory of count elements of dtype)
  // holds the values after Finish().
  absl::Status Upload(const float* src, int64_t count, DeviceDType dtype, void* dst);
  // Waits until every enqueued upload has landed; the first copy error, if any.
  absl::Status Finish();

 private:
  DeviceUploader() = default;
  size_t chunk_bytes_ = 0;
  PinnedBuffer staging_[2];
  cudaEvent_t reusable_[2] = {nullptr, nullptr};  // recorded after the copy out of each
  cudaStream_t stream_ = nullptr;
  int next_ = 0;  // the staging buffer the next chunk fills
};

}  // namespace tpserve

#endif  // TPSERVE_WORKER_CUDA_DEVICE_UPLOADER_H_
