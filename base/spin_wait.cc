#include "base/spin_wait.h"

#include <sched.h>

#include "absl/time/clock.h"

namespace tpserve {
namespace {

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

absl::Status SpinWait(const std::function<bool()>& done,
                      const std::function<absl::Status()>& failure,
                      const SpinWaitOptions& options) {
  for (int i = 0; i < options.spins; ++i) {
    if (done()) return absl::OkStatus();
    CpuRelax();
  }
  for (int i = 0; i < options.yields; ++i) {
    if (done()) return absl::OkStatus();
    sched_yield();
  }
  absl::Time next_check = absl::Now() + options.check_every;
  for (;;) {
    if (done()) return absl::OkStatus();
    absl::SleepFor(options.sleep);
    const absl::Time now = absl::Now();
    if (now < next_check) continue;
    next_check = now + options.check_every;
    absl::Status failed = failure();
    if (failed.ok()) continue;
    if (done()) return absl::OkStatus();  // completed between the last look and the check
    return failed;
  }
}

}  // namespace tpserve
