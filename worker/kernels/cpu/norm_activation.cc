#include "worker/kernels/cpu/norm_activation.h"

#include <algorithm>
#include <cmath>

#include "worker/kernels/cpu/cpu_threads.h"
#include "worker/kernels/cpu/vec_math.h"

namespace tpserve {
namespace {

// Σ row[j]² over dim elements: sixteen running sums (two registers, so the adds do not
// wait on one another), combined in a fixed order, then the tail. A row's sum depends on
// the row alone, never on the batch it came in.
float SumSquares(const float* row, int64_t dim) {
  V8 s0 = Splat(0.0f), s1 = Splat(0.0f);
  int64_t j = 0;
  for (; j + 16 <= dim; j += 16) {
    const V8 a = Load8(row + j), b = Load8(row + j + 8);
    s0 += a * a;
    s1 += b * b;
  }
  if (j + 8 <= dim) {
    const V8 a = Load8(row + j);
    s0 += a * a;
    j += 8;
  }
  float sum = LaneSum(s0 + s1);
  for (; j < dim; ++j) sum += row[j] * row[j];
  return sum;
}

// Rows per compute thread: at least 16 Ki elements each, or a team costs more than it saves.
int64_t MinRowsPerThread(int64_t row_elements) {
  return (16384 + row_elements - 1) / std::max<int64_t>(row_elements, 1);
}

void RmsNormRows(const float* x, const float* weight, int64_t begin, int64_t end, int64_t dim,
                 float eps, float* out) {
  for (int64_t i = begin; i < end; ++i) {
    const float* row = x + i * dim;
    float* dst = out + i * dim;
    const float inv = 1.0f / std::sqrt(SumSquares(row, dim) / static_cast<float>(dim) + eps);
    const V8 inv8 = Splat(inv);
    int64_t j = 0;
    for (; j + 8 <= dim; j += 8) Store8(dst + j, Load8(weight + j) * (Load8(row + j) * inv8));
    for (; j < dim; ++j) dst[j] = weight[j] * (row[j] * inv);
  }
}

template <Activation kAct>
void ActMulRows(const float* gate_up, int64_t begin, int64_t end, int64_t width, float* out) {
  for (int64_t i = begin; i < end; ++i) {
    const float* gate = gate_up + i * 2 * width;
    const float* up = gate + width;
    float* dst = out + i * width;
    int64_t j = 0;
    if constexpr (kAct == Activation::kSilu) {
      // g · sigmoid(g) = g / (1 + e^−g), eight lanes at a time (Exp: a few ulp of expf;
      // e^−g saturates past |g| ≈ 87, where g / (1 + e^−g) is g or −0 either way).
      for (; j + 8 <= width; j += 8) {
        const V8 g = Load8(gate + j);
        Store8(dst + j, g / (Splat(1.0f) + Exp(-g)) * Load8(up + j));
      }
    }
    for (; j < width; ++j) dst[j] = Activate(kAct, gate[j]) * up[j];
  }
}

void ActMulRange(Activation act, const float* gate_up, int64_t begin, int64_t end,
                 int64_t width, float* out) {
  switch (act) {  // one loop per activation: the switch stays out of it
    case Activation::kSilu:
      return ActMulRows<Activation::kSilu>(gate_up, begin, end, width, out);
    case Activation::kGelu:
      return ActMulRows<Activation::kGelu>(gate_up, begin, end, width, out);
    case Activation::kGeluTanh:
      return ActMulRows<Activation::kGeluTanh>(gate_up, begin, end, width, out);
    case Activation::kRelu:
      return ActMulRows<Activation::kRelu>(gate_up, begin, end, width, out);
  }
}

}  // namespace

// Rows split between the compute threads (cpu_threads.h); a row's bits are its own.
void RmsNorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* out) {
  ParallelRanges(n, MinRowsPerThread(dim), [&](int64_t begin, int64_t end) {
    RmsNormRows(x, weight, begin, end, dim, eps, out);
  });
}

void AddRmsNorm(float* residual, const float* x, const float* weight, int64_t n, int64_t dim,
                float eps, float* out) {
  // A row at a time: the sum, its squares and the normalised row read the row while it
  // is still in L1 (whole-tensor passes streamed a prefill's residual from memory twice).
  ParallelRanges(n, MinRowsPerThread(dim), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      AddInto(residual + i * dim, x + i * dim, dim);
      RmsNormRows(residual, weight, i, i + 1, dim, eps, out);
    }
  });
}

void ActMul(Activation act, const float* gate_up, int64_t n, int64_t width, float* out) {
  ParallelRanges(n, MinRowsPerThread(2 * width), [&](int64_t begin, int64_t end) {
    ActMulRange(act, gate_up, begin, end, width, out);
  });
}

}  // namespace tpserve
