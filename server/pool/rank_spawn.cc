#include "server/pool/rank_spawn.h"

#include <fcntl.h>
#include <limits.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/subprocess.h"

namespace tpserve {
namespace {

absl::Status ErrnoError(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

// A pipe holding `token`, its write end closed: the reader sees the token, then EOF.
absl::StatusOr<int> TokenPipe(absl::string_view token) {
  if (token.size() > PIPE_BUF) return absl::InvalidArgumentError("worker token too long");
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return ErrnoError("pipe2");
  const ssize_t n = write(fds[1], token.data(), token.size());
  const int write_errno = errno;
  close(fds[1]);
  if (n != static_cast<ssize_t>(token.size())) {
    close(fds[0]);
    errno = write_errno;
    return ErrnoError("writing the worker token");
  }
  return fds[0];
}

}  // namespace

absl::StatusOr<pid_t> SpawnWithToken(std::vector<std::string> argv, absl::string_view token) {
  if (argv.empty()) return absl::InvalidArgumentError("empty argv");
  absl::StatusOr<int> token_fd = TokenPipe(token);
  if (!token_fd.ok()) return token_fd.status();
  const int fd = *token_fd;
  argv.push_back("--worker-token-fd");
  argv.push_back(absl::StrCat(fd));
  absl::StatusOr<pid_t> pid = Spawn(argv, /*inherit_fd=*/fd);
  close(fd);  // the child has its own copy
  return pid;
}

}  // namespace tpserve
