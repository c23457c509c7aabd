#include "worker/kernels/cpu/gemm.h"

#include <cblas.h>

namespace tpserve {

void MatMulTransB(const float* x, const float* w, int64_t n, int64_t k, int64_t m, float* y,
                  bool accumulate) {
  if (n == 0 || m == 0) return;
  if (n == 1) {
    // Decode: a matrix-vector product. sgemm would pack all of w first, reading it twice.
    cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<blasint>(m), static_cast<blasint>(k),
                1.0f, w, static_cast<blasint>(k), x, 1, accumulate ? 1.0f : 0.0f, y, 1);
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(n),
              static_cast<blasint>(m), static_cast<blasint>(k), 1.0f, x,
              static_cast<blasint>(k), w, static_cast<blasint>(k), accumulate ? 1.0f : 0.0f, y,
              static_cast<blasint>(m));
}

void MatMulTransBReference(const float* x, const float* w, int64_t n, int64_t k, int64_t m,
                           float* y, bool accumulate) {
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < m; ++j) {
      double acc = 0.0;
      for (int64_t p = 0; p < k; ++p) acc += double(x[i * k + p]) * double(w[j * k + p]);
      y[i * m + j] = static_cast<float>(acc + (accumulate ? y[i * m + j] : 0.0));
    }
  }
}

void SetGemmThreads(int threads) { openblas_set_num_threads(threads); }

}  // namespace tpserve
