#include "worker/tensor.h"

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

Tensor::Tensor(Shape shape)
    : shape_(std::move(shape)), data_(static_cast<size_t>(NumElements(shape_)), 0.0f) {}

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
