// SpinWait: waiting for another process's progress seen through shared memory (the
// shared-memory collectives of same-host ranks, the CPU emulator's NCCL).
//
// done() is asked in a loop: first `spins` times back to back (with a CPU pause), then
// `yields` times yielding the core, then with a `sleep` between looks, so a short wait
// costs no context switch and a long one little CPU. From the first sleep on, every
// `check_every`, failure() says whether the wait can still end (a peer exited, broke the
// group, a deadline passed): a non-OK status ends the wait with it — unless done() has
// become true meanwhile, since a peer that completed the wait and then left did not
// fail it. failure() is where the caller puts its deadline.
#ifndef TPSERVE_BASE_SPIN_WAIT_H_
#define TPSERVE_BASE_SPIN_WAIT_H_

#include <functional>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace tpserve {

struct SpinWaitOptions {
  int spins = 2000;
  int yields = 200;
  absl::Duration sleep = absl::Microseconds(50);
  absl::Duration check_every = absl::Milliseconds(5);
};

absl::Status SpinWait(const std::function<bool()>& done,
                      const std::function<absl::Status()>& failure,
                      const SpinWaitOptions& options = SpinWaitOptions());

}  // namespace tpserve

#endif  // TPSERVE_BASE_SPIN_WAIT_H_
