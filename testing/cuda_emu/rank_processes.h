// Test helper for the emulator's NCCL (nccl.cc), whose ranks are processes: runs a body
// once per rank, rank 0 in the calling process and the others in forked children.
//
// Fork before starting any thread (a child gets only the forking thread, and a lock held
// by another one stays held there); pass what rank 0 creates later, such as a store's
// port, to the children through a pipe made before the call (RankPipe).
#ifndef TPSERVE_TESTING_CUDA_EMU_RANK_PROCESSES_H_
#define TPSERVE_TESTING_CUDA_EMU_RANK_PROCESSES_H_

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace tpserve {
namespace emu {

// A rank's body: "" when everything held, else what failed.
using RankBody = std::function<std::string(int rank)>;

// Runs body(r) for r in [0, nranks). Returns each rank's failure ("" for none); a child
// that has not exited `limit` after rank 0's body returned is killed and reported.
inline std::vector<std::string> RunRanks(int nranks, const RankBody& body,
                                         std::chrono::seconds limit = std::chrono::seconds(60)) {
  std::vector<pid_t> children;
  for (int r = 1; r < nranks; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      const std::string failure = body(r);
      if (!failure.empty()) std::fprintf(stderr, "rank %d: %s\n", r, failure.c_str());
      std::fflush(nullptr);
      _exit(failure.empty() ? 0 : 1);
    }
    children.push_back(pid);
  }
  std::vector<std::string> failures(nranks);
  failures[0] = body(0);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (int r = 1; r < nranks; ++r) {
    const pid_t child = children[r - 1];
    int status = 0;
    if (child < 0) {
      failures[r] = "fork failed";
      continue;
    }
    while (waitpid(child, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(child, SIGKILL);
        waitpid(child, &status, 0);
        failures[r] = "hung; killed";
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (failures[r].empty() && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      failures[r] = "failed (see its stderr above)";
    }
  }
  return failures;
}

// One int from rank 0 to every other rank: make it before RunRanks, Send() from rank 0
// (once per child), Receive() in each child.
class RankPipe {
 public:
  RankPipe() {
    if (pipe(fds_) != 0) fds_[0] = fds_[1] = -1;
  }
  ~RankPipe() {
    for (int fd : fds_) {
      if (fd >= 0) close(fd);
    }
  }
  RankPipe(const RankPipe&) = delete;
  RankPipe& operator=(const RankPipe&) = delete;

  void Send(int value, int children) {
    for (int i = 0; i < children; ++i) {
      if (write(fds_[1], &value, sizeof(value)) != sizeof(value)) return;
    }
  }
  // -1 when the pipe broke.
  int Receive() {
    int value = -1;
    return read(fds_[0], &value, sizeof(value)) == sizeof(value) ? value : -1;
  }

 private:
  int fds_[2];
};

}  // namespace emu
}  // namespace tpserve

#endif  // TPSERVE_TESTING_CUDA_EMU_RANK_PROCESSES_H_
