#include "base/subprocess.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace tpserve {

absl::StatusOr<std::string> SelfExecutable() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return absl::InternalError(absl::StrCat("readlink /proc/self/exe: ", strerror(errno)));
  return std::string(buf, n);
}

absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& argv) {
  if (argv.empty()) return absl::InvalidArgumentError("empty argv");
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
  if (pid == 0) {
    // Only async-signal-safe calls from here to exec.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the parent died before prctl took effect
    execv(args[0], args.data());
    _exit(127);
  }
  return pid;
}

namespace {

ChildExit Decode(pid_t pid, int status) {
  ChildExit e;
  e.pid = pid;
  if (WIFEXITED(status)) e.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) e.signal = WTERMSIG(status);
  return e;
}

}  // namespace

std::vector<ChildExit> WaitAllOrKill(const std::vector<pid_t>& pids, absl::Duration grace) {
  std::vector<ChildExit> exits(pids.size());
  std::vector<bool> done(pids.size(), false);
  size_t remaining = pids.size();
  bool killing = false;
  absl::Time kill_deadline = absl::InfiniteFuture();
  while (remaining > 0) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (done[i]) continue;
      int status = 0;
      const pid_t r = waitpid(pids[i], &status, WNOHANG);
      if (r == 0) continue;
      done[i] = true;
      --remaining;
      exits[i] = r == pids[i] ? Decode(pids[i], status) : ChildExit{pids[i], -1, 0};
      const bool failed = exits[i].exit_code != 0;
      if (failed && !killing) {
        killing = true;
        kill_deadline = absl::Now() + grace;
        for (size_t j = 0; j < pids.size(); ++j) {
          if (!done[j]) kill(pids[j], SIGTERM);
        }
      }
    }
    if (killing && absl::Now() > kill_deadline) {
      for (size_t j = 0; j < pids.size(); ++j) {
        if (!done[j]) kill(pids[j], SIGKILL);
      }
    }
    if (remaining > 0) absl::SleepFor(absl::Milliseconds(5));
  }
  return exits;
}

}  // namespace tpserve
