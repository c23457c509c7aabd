// Timing for the kernel benchmarks: variants of a call timed in turn, so that the slow and
// fast spells of a shared host meet every variant alike.
#ifndef TPSERVE_WORKER_KERNELS_CPU_IN_TURNS_H_
#define TPSERVE_WORKER_KERNELS_CPU_IN_TURNS_H_

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/functional/function_ref.h"

namespace tpserve {

inline double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

inline double MedianOf(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// Per variant: the median seconds a call, and the median over rounds of its time over
// variant 0's in the same round.
struct InTurns {
  std::vector<double> seconds, ratio;
};

// call(v) for v in [0, variants): one warm-up call each, then rounds in which every
// variant is called once, the first of the round rotating, for at least 8 rounds and
// min_seconds.
inline InTurns TimeInTurns(size_t variants, double min_seconds,
                           absl::FunctionRef<void(size_t variant)> call) {
  for (size_t v = 0; v < variants; ++v) call(v);
  std::vector<std::vector<double>> times(variants), ratios(variants);
  const auto start = std::chrono::steady_clock::now();
  for (size_t round = 0; round < 8 || SecondsSince(start) < min_seconds; ++round) {
    std::vector<double> t(variants);
    for (size_t i = 0; i < variants; ++i) {
      const size_t v = (i + round) % variants;
      const auto t0 = std::chrono::steady_clock::now();
      call(v);
      t[v] = SecondsSince(t0);
    }
    for (size_t v = 0; v < variants; ++v) {
      times[v].push_back(t[v]);
      ratios[v].push_back(t[v] / t[0]);
    }
  }
  InTurns out;
  for (size_t v = 0; v < variants; ++v) {
    out.seconds.push_back(MedianOf(times[v]));
    out.ratio.push_back(MedianOf(ratios[v]));
  }
  return out;
}

// The most calls a second of three trials, each calling call() in runs of 64 for at
// least min_seconds / 3: a kernel's rate with its operands in cache.
inline double BestCallsPerSecond(double min_seconds, absl::FunctionRef<void()> call) {
  double best = 0;
  for (int trial = 0; trial < 3; ++trial) {
    int64_t calls = 0;
    const auto start = std::chrono::steady_clock::now();
    do {
      for (int i = 0; i < 64; ++i, ++calls) call();
    } while (SecondsSince(start) < min_seconds / 3);
    best = std::max(best, calls / SecondsSince(start));
  }
  return best;
}

}  // namespace tpserve

#endif  // TPSERVE_WORKER_KERNELS_CPU_IN_TURNS_H_
