#include "worker/kernels/cpu/cpu_threads.h"

#include <omp.h>

#include <algorithm>
#include <atomic>

namespace tpserve {
namespace {

std::atomic<int> cpu_threads{1};

}  // namespace

void SetCpuThreads(int threads) {
  cpu_threads.store(std::max(threads, 1), std::memory_order_relaxed);
}

int CpuThreads() { return cpu_threads.load(std::memory_order_relaxed); }

void ParallelRanges(int64_t count, int64_t min_per_thread,
                    absl::FunctionRef<void(int64_t, int64_t)> body) {
  if (count <= 0) return;
  const int64_t by_size = count / std::max<int64_t>(min_per_thread, 1);
  const int threads = static_cast<int>(std::clamp<int64_t>(by_size, 1, CpuThreads()));
  if (threads == 1) {
    body(0, count);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num(), n = omp_get_num_threads();
    const int64_t begin = count * t / n, end = count * (t + 1) / n;
    if (begin < end) body(begin, end);
  }
}

void ParallelEach(int64_t count, absl::FunctionRef<void(int64_t)> body) {
  const int threads = static_cast<int>(std::clamp<int64_t>(count, 1, CpuThreads()));
  if (threads == 1) {
    for (int64_t i = 0; i < count; ++i) body(i);
    return;
  }
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t i = 0; i < count; ++i) body(i);
}

void ParallelChunks(int64_t count, int64_t min_chunk, int threads,
                    absl::FunctionRef<void(int64_t, int64_t)> body) {
  if (count <= 0) return;
  min_chunk = std::max<int64_t>(min_chunk, 1);
  const int team =
      static_cast<int>(std::clamp<int64_t>(count / min_chunk, 1, std::max(threads, 1)));
  if (team == 1) {
    body(0, count);
    return;
  }
  std::atomic<int64_t> next{0};  // the first item not yet taken
#pragma omp parallel num_threads(team)
  {
    const int64_t n = omp_get_num_threads();
    for (;;) {
      // The share is sized from a count that may be stale; the fetch_add alone decides
      // which items are taken, so every item is taken exactly once.
      const int64_t left = count - next.load(std::memory_order_relaxed);
      if (left <= 0) break;
      const int64_t size = std::max(min_chunk, left / (2 * n));
      const int64_t begin = next.fetch_add(size, std::memory_order_relaxed);
      if (begin >= count) break;
      body(begin, std::min(count, begin + size));
    }
  }
}

}  // namespace tpserve
