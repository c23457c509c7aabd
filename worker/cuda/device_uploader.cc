#include "worker/cuda/device_uploader.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/parallel_for.h"
#include "base/status_macros.h"
#include "worker/cuda/cuda_status.h"
#include "worker/dtype.h"

namespace tpserve {

absl::StatusOr<std::unique_ptr<DeviceUploader>> DeviceUploader::Create(size_t chunk_bytes) {
  if (chunk_bytes < 4 || chunk_bytes % 4 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("DeviceUploader chunk of ", chunk_bytes, " bytes: a multiple of 4 needed"));
  }
  std::unique_ptr<DeviceUploader> up(new DeviceUploader);
  up->chunk_bytes_ = chunk_bytes;
  for (int i = 0; i < 2; ++i) {
    TPSERVE_ASSIGN_OR_RETURN(up->staging_[i], PinnedBuffer::Create(chunk_bytes));
    TPSERVE_CUDA_RETURN_IF_ERROR(cudaEventCreate(&up->reusable_[i]));
  }
  TPSERVE_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&up->stream_, cudaStreamNonBlocking));
  return up;
}

DeviceUploader::~DeviceUploader() {
  if (stream_ != nullptr) {
    cudaStreamSynchronize(stream_);  // the staging buffers are freed next
    cudaStreamDestroy(stream_);
  }
  for (cudaEvent_t e : reusable_) {
    if (e != nullptr) cudaEventDestroy(e);
  }
}

absl::Status DeviceUploader::Upload(const float* src, int64_t count, DeviceDType dtype, void* dst) {
  if (count < 0 || (count > 0 && (src == nullptr || dst == nullptr))) {
    return absl::InvalidArgumentError(absl::StrCat("DeviceUploader: ", count, " elements from ",
                                                   src == nullptr ? "null" : "host", " to ",
                                                   dst == nullptr ? "null" : "device"));
  }
  const size_t element = dtype == DeviceDType::kBFloat16 ? 2 : 4;
  const int64_t per_chunk = static_cast<int64_t>(chunk_bytes_ / element);
  for (int64_t done = 0; done < count;) {
    const int64_t n = std::min(per_chunk, count - done);
    const int b = next_;
    next_ ^= 1;
    // The copy out of this buffer two chunks ago must be done before it is refilled.
    TPSERVE_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(reusable_[b]));
    const float* from = src + done;
    char* to = staging_[b].as<char>();
    // Memory-bound: a chunk converts on several cores while the previous one is copied.
    ParallelForBulk(n, sizeof(float), [&](int64_t begin, int64_t end) {
      if (dtype == DeviceDType::kBFloat16) {
        FloatsToBf16(from + begin, static_cast<size_t>(end - begin),
                     reinterpret_cast<uint16_t*>(to) + begin);
      } else {
        std::memcpy(to + begin * 4, from + begin, static_cast<size_t>(end - begin) * 4);
      }
    });
    TPSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(static_cast<char*>(dst) + done * element,
                                                 staging_[b].data(), n * element,
                                                 cudaMemcpyHostToDevice, stream_));
    TPSERVE_CUDA_RETURN_IF_ERROR(cudaEventRecord(reusable_[b], stream_));
    done += n;
  }
  return absl::OkStatus();
}

absl::Status DeviceUploader::Finish() {
  TPSERVE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

}  // namespace tpserve
