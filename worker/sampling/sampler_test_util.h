// Test reference for the samplers (CPU and GPU): raw log-softmax of one logits row in
// double precision. Test-only; pure.
#ifndef TPSERVE_WORKER_SAMPLING_SAMPLER_TEST_UTIL_H_
#define TPSERVE_WORKER_SAMPLING_SAMPLER_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace tpserve {

// row: [n] -> log_softmax(row): [n].
inline std::vector<double> LogSoftmax(const float* row, int64_t n) {
  const double max = *std::max_element(row, row + n);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(row[i] - max);
  std::vector<double> out(n);
  for (int64_t i = 0; i < n; ++i) out[i] = row[i] - max - std::log(sum);
  return out;
}

}  // namespace tpserve

#endif  // TPSERVE_WORKER_SAMPLING_SAMPLER_TEST_UTIL_H_
