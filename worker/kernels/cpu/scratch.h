// A 64-byte-aligned scratch buffer, grown as needed and never shrunk: a kernel's
// per-thread working memory (thread_local Scratch<T>), aligned so that no 64-byte vector
// or tile row it holds spans two cache lines. Get's contents are unspecified after growth.
#ifndef TPSERVE_WORKER_KERNELS_CPU_SCRATCH_H_
#define TPSERVE_WORKER_KERNELS_CPU_SCRATCH_H_

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>

namespace tpserve {

template <typename T>
class Scratch {
 public:
  // At least `count` elements from a 64-byte boundary; throws std::bad_alloc.
  T* Get(int64_t count) {
    if (count > capacity_) {
      const size_t bytes = (static_cast<size_t>(count) * sizeof(T) + 63) / 64 * 64;
      data_.reset(static_cast<T*>(std::aligned_alloc(64, bytes)));
      if (data_ == nullptr) throw std::bad_alloc();  // as a std::vector would
      capacity_ = count;
    }
    return data_.get();
  }

 private:
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T, Free> data_;
  int64_t capacity_ = 0;
};

}  // namespace tpserve

#endif  // TPSERVE_WORKER_KERNELS_CPU_SCRATCH_H_
