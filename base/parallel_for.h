// ParallelFor: body(begin, end) over [0, count) split into contiguous ranges, one per
// thread, for bulk loops that are memory-bound on one core (model load: converting and
// copying gigabytes of weights). Uses up to max_threads threads (the caller's included),
// never more than the CPUs this process may use (AvailableCpus: its affinity mask and
// cgroup CPU limit, which std::thread::hardware_concurrency() does not read) nor one per
// min_per_thread items, so small counts run inline with no thread started. Returns when every range is
// done. body must be safe to run concurrently on disjoint ranges and must not throw.
#ifndef TPSERVE_BASE_PARALLEL_FOR_H_
#define TPSERVE_BASE_PARALLEL_FOR_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "base/available_cpus.h"

namespace tpserve {

// The number of ranges ParallelFor would use for these arguments.
inline int ParallelForThreads(int64_t count, int64_t min_per_thread, int max_threads) {
  const int64_t cpus = AvailableCpus();
  const int64_t by_size = min_per_thread > 0 ? count / min_per_thread : count;
  return static_cast<int>(std::max<int64_t>(1, std::min({cpus, int64_t{max_threads}, by_size})));
}

template <typename Body>
void ParallelFor(int64_t count, int64_t min_per_thread, int max_threads, const Body& body) {
  const int threads = ParallelForThreads(count, min_per_thread, max_threads);
  if (threads <= 1) {
    if (count > 0) body(int64_t{0}, count);
    return;
  }
  const int64_t per = (count + threads - 1) / threads;
  std::vector<std::thread> helpers;
  helpers.reserve(threads - 1);
  for (int t = 1; t < threads; ++t) {
    const int64_t begin = std::min(count, t * per), end = std::min(count, begin + per);
    if (begin < end) helpers.emplace_back([&body, begin, end] { body(begin, end); });
  }
  body(int64_t{0}, std::min(count, per));
  for (std::thread& h : helpers) h.join();
}

// ParallelFor for bulk memory work (model load): items of `item_bytes` each, at least
// 4 MiB per thread, at most 8 threads.
template <typename Body>
void ParallelForBulk(int64_t count, int64_t item_bytes, const Body& body) {
  constexpr int64_t kMinBytesPerThread = int64_t{4} << 20;
  constexpr int kMaxThreads = 8;
  ParallelFor(count, std::max<int64_t>(1, kMinBytesPerThread / std::max<int64_t>(1, item_bytes)),
              kMaxThreads, body);
}

// memcpy(dst, src, bytes) through ParallelForBulk.
inline void ParallelCopy(void* dst, const void* src, size_t bytes) {
  ParallelForBulk(static_cast<int64_t>(bytes), 1, [&](int64_t begin, int64_t end) {
    std::memcpy(static_cast<char*>(dst) + begin, static_cast<const char*>(src) + begin,
                static_cast<size_t>(end - begin));
  });
}

}  // namespace tpserve

#endif  // TPSERVE_BASE_PARALLEL_FOR_H_
