#include "worker/comm/rank_launcher.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/subprocess.h"
#include "rendezvous/store_server.h"

namespace tpserve {

absl::Status RunLocalRanks(
    int tp, const std::function<std::vector<std::string>(int rank, int store_port)>& argv_for_rank) {
  TPSERVE_ASSIGN_OR_RETURN(std::unique_ptr<StoreServer> store, StoreServer::Start());
  std::vector<pid_t> pids;
  for (int r = 0; r < tp; ++r) {
    absl::StatusOr<pid_t> pid = Spawn(argv_for_rank(r, store->port()));
    if (!pid.ok()) {
      TerminateAndReap(pids, absl::Seconds(2));
      return pid.status();
    }
    pids.push_back(*pid);
  }
  const std::vector<ChildExit> exits = WaitAllOrKill(pids, absl::Seconds(2));
  for (size_t r = 0; r < exits.size(); ++r) {
    if (exits[r].exit_code != 0) {
      return absl::InternalError(
          absl::StrCat("rank ", r, " failed (", DescribeExit(exits[r]), ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace tpserve
