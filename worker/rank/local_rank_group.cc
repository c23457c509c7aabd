#include "worker/rank/local_rank_group.h"

#include <memory>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "worker/comm/local_comm_group.h"
#include "worker/models/model_files.h"
#include "worker/models/model_runner.h"

namespace tpserve {

absl::StatusOr<std::unique_ptr<LocalRankGroup>> LocalRankGroup::Create(
    const std::string& model_dir, int tp, const RankExecutorOptions& options) {
  if (tp < 1) return absl::InvalidArgumentError("tp must be ≥ 1");
  TPSERVE_ASSIGN_OR_RETURN(ModelFiles files, OpenModel(model_dir, tp));
  std::vector<std::unique_ptr<LocalCommGroup>> comms = LocalCommGroup::Create(tp);
  std::vector<absl::StatusOr<std::unique_ptr<RankExecutor>>> made(tp);
  std::vector<std::thread> threads;
  for (int r = 0; r < tp; ++r) {
    threads.emplace_back([&, r] {
      absl::StatusOr<std::unique_ptr<LlamaModel>> model = LoadModel(files, comms[r].get());
      if (!model.ok()) {
        made[r] = model.status();
        return;
      }
      made[r] = RankExecutor::Create(std::move(comms[r]),
                                     std::make_unique<CpuModelRunner>(*std::move(model)), options);
    });
  }
  for (std::thread& t : threads) t.join();
  std::vector<std::unique_ptr<RankExecutor>> ranks;
  for (int r = 0; r < tp; ++r) {
    if (!made[r].ok()) return made[r].status();
    ranks.push_back(*std::move(made[r]));
  }
  return std::unique_ptr<LocalRankGroup>(new LocalRankGroup(std::move(ranks)));
}

absl::StatusOr<worker::v1::StepResult> LocalRankGroup::Execute(const worker::v1::StepPlan& plan) {
  std::vector<absl::StatusOr<worker::v1::StepResult>> results(ranks_.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    threads.emplace_back([&, r] { results[r] = ranks_[r]->Execute(plan); });
  }
  for (std::thread& t : threads) t.join();
  for (size_t r = 0; r < ranks_.size(); ++r) {
    if (!results[r].ok()) return results[r].status();
    if (results[r]->step() != plan.step()) {
      return absl::InternalError(absl::StrCat("rank ", r, " answered step ", results[r]->step(),
                                              " to plan ", plan.step()));
    }
  }
  return std::move(results[0]);
}

}  // namespace tpserve
