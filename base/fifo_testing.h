// Test helpers for code that must not block on a FIFO found where a file should be.
// ReturnsWithin runs the call on its own thread; past the timeout it keeps opening and
// closing the FIFO's write end, so that a blocked open() or read() sees end-of-file and
// the test fails instead of hanging. Called from test threads.
#ifndef TPSERVE_BASE_FIFO_TESTING_H_
#define TPSERVE_BASE_FIFO_TESTING_H_

#include <functional>
#include <string>

#include "absl/time/time.h"

namespace tpserve {

// mkfifo(path, 0644); false (with errno set) when that fails.
bool MakeFifo(const std::string& path);

// True when `call` returned within `timeout`; either way it has returned by the end.
bool ReturnsWithin(absl::Duration timeout, const std::string& fifo,
                   const std::function<void()>& call);

}  // namespace tpserve

#endif  // TPSERVE_BASE_FIFO_TESTING_H_
