#include "worker/kernels/cpu/norm_activation.h"

#include <cmath>

namespace tpserve {

void RmsNorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float* row = x + i * dim;
    float* dst = out + i * dim;
    float sum_sq = 0.0f;
    for (int64_t j = 0; j < dim; ++j) sum_sq += row[j] * row[j];
    const float inv = 1.0f / std::sqrt(sum_sq / static_cast<float>(dim) + eps);
    for (int64_t j = 0; j < dim; ++j) dst[j] = weight[j] * (row[j] * inv);
  }
}

void AddRmsNorm(float* residual, const float* x, const float* weight, int64_t n, int64_t dim,
                float eps, float* out) {
  for (int64_t i = 0; i < n * dim; ++i) residual[i] += x[i];
  RmsNorm(residual, weight, n, dim, eps, out);
}

namespace {

template <Activation kAct>
void ActMulRows(const float* gate_up, int64_t n, int64_t width, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float* gate = gate_up + i * 2 * width;
    const float* up = gate + width;
    float* dst = out + i * width;
    for (int64_t j = 0; j < width; ++j) {
      const float g = gate[j];
      dst[j] = Activate(kAct, g) * up[j];
    }
  }
}

}  // namespace

void ActMul(Activation act, const float* gate_up, int64_t n, int64_t width, float* out) {
  switch (act) {  // one loop per activation: the switch stays out of it
    case Activation::kSilu:
      return ActMulRows<Activation::kSilu>(gate_up, n, width, out);
    case Activation::kGelu:
      return ActMulRows<Activation::kGelu>(gate_up, n, width, out);
    case Activation::kGeluTanh:
      return ActMulRows<Activation::kGeluTanh>(gate_up, n, width, out);
    case Activation::kRelu:
      return ActMulRows<Activation::kRelu>(gate_up, n, width, out);
  }
}

}  // namespace tpserve
