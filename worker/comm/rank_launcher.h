// RunLocalRanks: the coordinator side of a one-host CPU rank pool for the offline
// tools (forward, benchmarks): start a rendezvous StoreServer, spawn one process per
// rank, wait for all of them, and kill the rest as soon as one fails.
#ifndef TPSERVE_WORKER_COMM_RANK_LAUNCHER_H_
#define TPSERVE_WORKER_COMM_RANK_LAUNCHER_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace tpserve {

// argv_for_rank(rank, store_port) gives the command line of each rank process.
// Returns OK when every rank exits 0; otherwise an error naming the first failure.
absl::Status RunLocalRanks(
    int tp, const std::function<std::vector<std::string>(int rank, int store_port)>& argv_for_rank);

}  // namespace tpserve

#endif  // TPSERVE_WORKER_COMM_RANK_LAUNCHER_H_
