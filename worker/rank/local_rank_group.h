// LocalRankGroup: tp RankExecutors in one process, ranks as threads over LocalCommGroup.
//
// The in-process stand-in for a worker pool: tests (and anything else that wants a
// model without processes) drive it with the same StepPlans a WorkerPool would send.
// Execute() runs the plan on every rank concurrently and returns rank 0's result.
// Called from one thread at a time.
#ifndef TPSERVE_WORKER_RANK_LOCAL_RANK_GROUP_H_
#define TPSERVE_WORKER_RANK_LOCAL_RANK_GROUP_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tpserve/v1/worker.pb.h"
#include "worker/rank/rank_executor.h"

namespace tpserve {

class LocalRankGroup {
 public:
  static absl::StatusOr<std::unique_ptr<LocalRankGroup>> Create(
      const std::string& model_dir, int tp, const RankExecutorOptions& options);

  // Rank 0's result; the first failing rank's status if any rank fails (ranks see the
  // same plan, so they accept or reject it together). Every rank's result must carry
  // the plan's step.
  absl::StatusOr<worker::v1::StepResult> Execute(const worker::v1::StepPlan& plan);

  int tp() const { return static_cast<int>(ranks_.size()); }
  RankExecutor& rank(int r) { return *ranks_[r]; }

 private:
  explicit LocalRankGroup(std::vector<std::unique_ptr<RankExecutor>> ranks)
      : ranks_(std::move(ranks)) {}
  std::vector<std::unique_ptr<RankExecutor>> ranks_;
};

}  // namespace tpserve

#endif  // TPSERVE_WORKER_RANK_LOCAL_RANK_GROUP_H_
