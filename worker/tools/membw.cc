#include "worker/tools/membw.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace tpserve {

double MeasureReadBandwidth(int threads, int64_t bytes_per_thread, int repeats) {
  const int64_t n = bytes_per_thread / sizeof(float);
  std::vector<std::vector<float>> buffers(threads, std::vector<float>(n, 1.0f));
  std::atomic<double> sink{0};
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        const float* p = buffers[t].data();
        float acc[8] = {0};
        for (int64_t i = 0; i + 8 <= n; i += 8) {
          for (int k = 0; k < 8; ++k) acc[k] += p[i + k];
        }
        double total = 0;
        for (float a : acc) total += a;
        sink = sink + total;
      });
    }
    for (std::thread& t : pool) t.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, threads * bytes_per_thread / s / 1e9);
  }
  return sink.load() < 0 ? 0 : best;
}

}  // namespace tpserve
