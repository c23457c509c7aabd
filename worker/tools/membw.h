// Measures this machine's memory read bandwidth the way a decode step uses it: threads
// streaming through buffers far larger than the caches.
#ifndef TPSERVE_WORKER_TOOLS_MEMBW_H_
#define TPSERVE_WORKER_TOOLS_MEMBW_H_

#include <cstdint>

namespace tpserve {

// Best of `repeats` passes of `threads` threads each summing its own `bytes_per_thread`
// buffer. Returns GB/s (1e9 bytes per second) over all threads.
double MeasureReadBandwidth(int threads, int64_t bytes_per_thread, int repeats);

}  // namespace tpserve

#endif  // TPSERVE_WORKER_TOOLS_MEMBW_H_
