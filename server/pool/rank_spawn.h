// Starting a spawned rank with the pool's worker token, so that the token is in no
// command line or environment: the child inherits the read end of a pipe holding it
// and is told its number (tpserve_worker --worker-token-fd N), reads it and closes it.
//
// base/subprocess.h's Spawn with the pipe as its inherit_fd: close-on-exec here, kept
// open only in that child, so no other child (spawned concurrently by any thread)
// inherits it; PATH is not searched and the child gets SIGKILL if this process dies.
#ifndef TPSERVE_SERVER_POOL_RANK_SPAWN_H_
#define TPSERVE_SERVER_POOL_RANK_SPAWN_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tpserve {

// Runs argv[0] with `argv` plus {"--worker-token-fd", N}. `token` must fit in a pipe's
// atomic write (PIPE_BUF, 4096 bytes). Returns the child's pid.
absl::StatusOr<pid_t> SpawnWithToken(std::vector<std::string> argv, absl::string_view token);

}  // namespace tpserve

#endif  // TPSERVE_SERVER_POOL_RANK_SPAWN_H_
