// Child processes for rank pools: spawn with a death signal tied to the parent, wait
// with a deadline, and kill what is left, so that no rank outlives its coordinator.
// Used by the forward tool and the frontend's worker pool; call from one thread.
#ifndef TPSERVE_BASE_SUBPROCESS_H_
#define TPSERVE_BASE_SUBPROCESS_H_

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tpserve {

// The path of the running executable (/proc/self/exe resolved).
absl::StatusOr<std::string> SelfExecutable();

// Starts argv[0] with `argv` (PATH is not searched). The child gets SIGKILL if this
// process dies. `inherit_fd` (≥ 0), a close-on-exec descriptor of this process, stays
// open in the child alone: its flag is cleared between fork and exec, so no child other
// threads spawn meanwhile inherits it. Returns the child's pid.
absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& argv, int inherit_fd = -1);

struct ChildExit {
  pid_t pid = 0;
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;
};

// Waits for every pid. When one exits non-zero (or by signal), the others get SIGTERM
// and, after `grace`, SIGKILL. Returns every child's exit, in `pids` order; the first
// failure is first in time but all are reaped before returning.
std::vector<ChildExit> WaitAllOrKill(const std::vector<pid_t>& pids, absl::Duration grace);

// Stops children that were asked to leave: waits up to `grace` for each pid to exit on
// its own, then sends SIGTERM, waits `grace` again, then SIGKILL, and reaps every one.
// Returns every child's exit, in `pids` order. Blocks at most about 2·grace.
std::vector<ChildExit> TerminateAndReap(const std::vector<pid_t>& pids, absl::Duration grace);

// The exit of `pid` if it has ended (reaping it), else nullopt. Never blocks.
std::optional<ChildExit> PollChild(pid_t pid);

// "exit 1", "signal 9".
std::string DescribeExit(const ChildExit& exit);

// Whether process `pid` (any process, not only a child) has exited: gone, or a zombie
// its parent has not reaped yet. Reads /proc; never reaps.
bool ProcessHasExited(pid_t pid);

}  // namespace tpserve

#endif  // TPSERVE_BASE_SUBPROCESS_H_
