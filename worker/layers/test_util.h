// Helpers for the layer tests: random tensors and a reference y = x·Wᵀ + b.
#ifndef TPSERVE_WORKER_LAYERS_TEST_UTIL_H_
#define TPSERVE_WORKER_LAYERS_TEST_UTIL_H_

#include <cmath>
#include <random>

#include "worker/kernels/cpu/gemm.h"
#include "worker/tensor.h"

namespace tpserve {

inline Tensor RandomTensor(Shape shape, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  Tensor t(std::move(shape));
  for (float& v : t.span()) v = dist(rng);
  return t;
}

// x: [n, in], w: [out, in], b: [out] or empty -> [n, out]
inline Tensor ReferenceLinear(const Tensor& x, const Tensor& w, const Tensor& b) {
  Tensor y({x.dim(0), w.dim(0)});
  MatMulTransBReference(x.data(), w.data(), x.dim(0), x.dim(1), w.dim(0), y.data());
  if (!b.empty()) {
    for (int64_t i = 0; i < y.dim(0); ++i) {
      for (int64_t j = 0; j < y.dim(1); ++j) y.row(i)[j] += b.data()[j];
    }
  }
  return y;
}

// ‖a − b‖ / ‖b‖; infinity when the shapes differ.
inline double RelativeError(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return INFINITY;
  double err = 0, norm = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    err += std::pow(double(a.data()[i]) - b.data()[i], 2);
    norm += std::pow(double(b.data()[i]), 2);
  }
  return std::sqrt(err / std::max(norm, 1e-30));
}

// Rows [begin, end) of a [rows, cols] (or [rows]) tensor.
inline Tensor SliceRows(const Tensor& t, int64_t begin, int64_t end) {
  Shape shape = t.shape();
  shape[0] = end - begin;
  const int64_t width = t.numel() / t.dim(0);
  std::vector<float> data(t.data() + begin * width, t.data() + end * width);
  return Tensor(shape, std::move(data));
}

}  // namespace tpserve

#endif  // TPSERVE_WORKER_LAYERS_TEST_UTIL_H_
