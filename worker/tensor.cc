#include "worker/tensor.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <new>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/check.h"

namespace tpserve {

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeToString(const Shape& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

void* AllocateZeroed(size_t bytes) {
  void* p = std::calloc(bytes > 0 ? bytes : 1, 1);
  if (p == nullptr) throw std::bad_alloc();
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;  // advise the whole 2 MiB pages inside
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(kHuge - 1);
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
  return p;
}

Tensor::Tensor(Shape shape)
    : shape_(std::move(shape)), data_(static_cast<size_t>(NumElements(shape_))) {}

Tensor::Tensor(Shape shape, const std::vector<float>& data)
    : shape_(std::move(shape)), data_(data.begin(), data.end()) {
  TPSERVE_CHECK(static_cast<int64_t>(data_.size()) == NumElements(shape_));
}

void Tensor::Resize(Shape shape) {
  const size_t n = static_cast<size_t>(NumElements(shape));
  if (n > data_.capacity()) {
    *this = Tensor(std::move(shape));  // fresh storage: the old elements are not copied
    return;
  }
  data_.resize(n);
  shape_ = std::move(shape);
}

absl::Status Tensor::Reshape(Shape shape) {
  if (NumElements(shape) != numel()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot reshape ", ShapeToString(shape_), " to ", ShapeToString(shape)));
  }
  shape_ = std::move(shape);
  return absl::OkStatus();
}

absl::Status CheckShape(const Tensor& t, const Shape& expected, const char* what) {
  if (t.shape() == expected) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, ": expected shape ", ShapeToString(expected),
                                                 ", got ", ShapeToString(t.shape())));
}

}  // namespace tpserve
