#include "worker/tensor.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

TEST(TensorTest, NewTensorsAreZeroFilledLargeOnesToo) {
  for (const Shape& shape : {Shape{3, 5}, Shape{}, Shape{0, 4}, Shape{1024, 1536}}) {
    const Tensor t(shape);  // the last is 6 MiB: whole huge pages are advised
    EXPECT_EQ(t.shape(), shape);
    EXPECT_EQ(t.numel(), NumElements(shape));
    int64_t nonzero = 0;
    for (float v : t.span()) nonzero += v != 0.0f;
    EXPECT_EQ(nonzero, 0) << ShapeToString(shape);
  }
}

TEST(TensorTest, ResizeReusesStorageThatIsLargeEnough) {
  Tensor t({1024, 1024});
  t.data()[0] = 1.0f;
  const float* storage = t.data();
  t.Resize({4, 8});
  EXPECT_EQ(t.shape(), (Shape{4, 8}));
  EXPECT_EQ(t.numel(), 32);
  EXPECT_EQ(t.data(), storage);
  t.Resize({512, 2048});  // as large as it started
  EXPECT_EQ(t.shape(), (Shape{512, 2048}));
  EXPECT_EQ(t.numel(), 512 * 2048);
  EXPECT_EQ(t.data(), storage);
  t.Resize({2048, 1024});  // larger: new storage, zero-filled
  EXPECT_EQ(t.shape(), (Shape{2048, 1024}));
  EXPECT_EQ(t.numel(), 2048 * 1024);
  EXPECT_EQ(t.data()[0], 0.0f);
  EXPECT_EQ(t.data()[t.numel() - 1], 0.0f);
}

TEST(TensorTest, ReshapeKeepsTheCount) {
  Tensor t({2, 6});
  EXPECT_TRUE(t.Reshape({3, 4}).ok());
  EXPECT_EQ(t.dim(-1), 4);
  const absl::Status s = t.Reshape({5});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "cannot reshape [3, 4] to [5]");
}

}  // namespace
}  // namespace tpserve
