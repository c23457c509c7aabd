#include "base/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace tpserve {

absl::StatusOr<std::string> SelfExecutable() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return absl::InternalError(absl::StrCat("readlink /proc/self/exe: ", strerror(errno)));
  return std::string(buf, n);
}

absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& argv, int inherit_fd) {
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
    if (inherit_fd >= 0 && fcntl(inherit_fd, F_SETFD, 0) != 0) _exit(127);
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

std::optional<ChildExit> PollChild(pid_t pid) {
  int status = 0;
  const pid_t r = waitpid(pid, &status, WNOHANG);
  if (r == 0) return std::nullopt;
  if (r == pid) return Decode(pid, status);
  return ChildExit{pid, -1, 0};  // not our child (or already reaped)
}

std::string DescribeExit(const ChildExit& exit) {
  return exit.signal != 0 ? absl::StrCat("signal ", exit.signal)
                          : absl::StrCat("exit ", exit.exit_code);
}

std::vector<ChildExit> TerminateAndReap(const std::vector<pid_t>& pids, absl::Duration grace) {
  std::vector<std::optional<ChildExit>> exits(pids.size());
  // Waits until every child has exited or `deadline`; true if all have.
  auto wait_until = [&](absl::Time deadline) {
    while (true) {
      bool all = true;
      for (size_t i = 0; i < pids.size(); ++i) {
        if (!exits[i]) exits[i] = PollChild(pids[i]);
        all = all && exits[i].has_value();
      }
      if (all || absl::Now() >= deadline) return all;
      absl::SleepFor(absl::Milliseconds(5));
    }
  };
  for (int sig : {SIGTERM, SIGKILL}) {
    if (wait_until(absl::Now() + grace)) break;
    for (size_t i = 0; i < pids.size(); ++i) {
      if (!exits[i]) kill(pids[i], sig);
    }
  }
  std::vector<ChildExit> result;
  for (size_t i = 0; i < pids.size(); ++i) {
    if (!exits[i]) {
      int status = 0;
      exits[i] = waitpid(pids[i], &status, 0) == pids[i] ? Decode(pids[i], status)
                                                          : ChildExit{pids[i], -1, 0};
    }
    result.push_back(*exits[i]);
  }
  return result;
}

bool ProcessHasExited(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const size_t paren = line.rfind(')');  // the command name may hold anything
  if (paren == std::string::npos || paren + 2 >= line.size()) return true;
  const char state = line[paren + 2];
  return state == 'Z' || state == 'X';
}

}  // namespace tpserve
