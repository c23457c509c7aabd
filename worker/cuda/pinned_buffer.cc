#include "worker/cuda/pinned_buffer.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "worker/cuda/cuda_status.h"

namespace tpserve {

void PinnedBuffer::Free::operator()(void* p) const {
  if (p != nullptr) cudaFreeHost(p);
}

absl::StatusOr<PinnedBuffer> PinnedBuffer::Create(size_t bytes) {
  PinnedBuffer buf;
  if (bytes == 0) return buf;
  void* p = nullptr;
  const cudaError_t err = cudaMallocHost(&p, bytes);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    return absl::ResourceExhaustedError(
        absl::StrCat("cudaMallocHost of ", bytes, " bytes: out of pinnable host memory"));
  }
  TPSERVE_CUDA_RETURN_IF_ERROR(err);
  buf.data_.reset(p);
  buf.bytes_ = bytes;
  return buf;
}

}  // namespace tpserve
