// PinnedBuffer: page-locked host memory (cudaMallocHost), so that cudaMemcpyAsync to and
// from it is truly asynchronous on a stream. Move-only; freed with cudaFreeHost. Used by
// the thread that owns the rank's device; the caller orders reuse against its stream.
#ifndef TPSERVE_WORKER_CUDA_PINNED_BUFFER_H_
#define TPSERVE_WORKER_CUDA_PINNED_BUFFER_H_

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"

namespace tpserve {

class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  // RESOURCE_EXHAUSTED when the host cannot pin `bytes`, INTERNAL for other CUDA errors.
  static absl::StatusOr<PinnedBuffer> Create(size_t bytes);

  void* data() const { return data_.get(); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data());
  }
  size_t bytes() const { return bytes_; }

 private:
  struct Free {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, Free> data_;
  size_t bytes_ = 0;
};

}  // namespace tpserve

#endif  // TPSERVE_WORKER_CUDA_PINNED_BUFFER_H_
