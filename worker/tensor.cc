#include "worker/tensor.h"

#include <sys/mman.h>

#include <cstdint>
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

namespace {

// Asks for transparent huge pages over the whole 2 MiB pages of [p, p + bytes): a large
// tensor's first touch then faults once per 2 MiB instead of once per 4 KiB, which is
// most of what loading a model costs. Advice only: where THP is off nothing changes.
void AdviseHugePages(void* p, size_t bytes) {
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(kHuge - 1);
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

}  // namespace

Tensor::Tensor(Shape shape) : shape_(std::move(shape)) {
  const size_t n = static_cast<size_t>(NumElements(shape_));
  data_.reserve(n);  // allocated, not yet touched
  AdviseHugePages(data_.data(), n * sizeof(float));
  data_.resize(n, 0.0f);
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

Tensor::Tensor(Shape shape, std::vector<float> data)
    : shape_(std::move(shape)), data_(std::move(data)) {
  TPSERVE_CHECK(static_cast<int64_t>(data_.size()) == NumElements(shape_));
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
