#include "tests/golden/plan_driver.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace tpserve {

using worker::v1::StepPlan;
using worker::v1::StepResult;

namespace {

struct Live {
  bool admitted = false, finished = false, dropped = false, preempted = false;
  std::vector<int32_t> tokens;  // known: prompt + generated
  int computed = 0;
  std::optional<int32_t> pending;  // sampled, not yet sent back
  std::vector<int32_t> blocks;
};

class Driver {
 public:
  Driver(const std::vector<DriverRequest>& requests, int block_size, int num_blocks)
      : reqs_(requests), live_(requests.size()), out_(requests.size()), block_size_(block_size) {
    for (int b = 0; b < num_blocks; ++b) free_.push_back(b);  // handed out from the top
  }

  absl::StatusOr<std::vector<DriverOutput>> Run(const StepFn& step_fn) {
    for (uint64_t step = 1; step < 100000; ++step) {
      StepPlan plan;
      plan.set_step(step);
      AddDrops(plan);
      std::vector<size_t> added, running;  // the batch is new ones, then running ones
      for (size_t i = 0; i < reqs_.size(); ++i) {
        TPSERVE_RETURN_IF_ERROR(Schedule(i, step, plan, added, running));
      }
      std::vector<size_t> scheduled = added;
      scheduled.insert(scheduled.end(), running.begin(), running.end());
      if (scheduled.empty() && plan.drop_seq_ids_size() == 0 && AllDone()) return out_;
      TPSERVE_ASSIGN_OR_RETURN(StepResult result, step_fn(plan));
      TPSERVE_RETURN_IF_ERROR(Collect(result, scheduled));
    }
    return absl::DeadlineExceededError("generation did not finish");
  }

 private:
  bool AllDone() const {
    for (const Live& l : live_) {
      if (!l.dropped) return false;
    }
    return true;
  }

  void Release(size_t i, StepPlan& plan) {
    plan.add_drop_seq_ids(i);
    free_.insert(free_.end(), live_[i].blocks.begin(), live_[i].blocks.end());
    live_[i].blocks.clear();
  }

  void AddDrops(StepPlan& plan) {
    for (size_t i = 0; i < reqs_.size(); ++i) {
      Live& l = live_[i];
      if (l.finished && !l.dropped) {
        Release(i, plan);
        l.dropped = true;
      } else if (reqs_[i].preempt_after > 0 && !l.preempted && l.pending &&
                 static_cast<int>(out_[i].ids.size()) == reqs_[i].preempt_after) {
        Release(i, plan);
        l.preempted = true;
        l.admitted = false;
        l.tokens.push_back(*l.pending);
        l.pending.reset();
        l.computed = 0;
      }
    }
  }

  absl::Status TakeBlocks(Live& l, int context) {
    while (static_cast<int>(l.blocks.size()) * block_size_ < context) {
      if (free_.empty()) return absl::ResourceExhaustedError("driver ran out of KV blocks");
      l.blocks.push_back(free_.back());
      free_.pop_back();
    }
    return absl::OkStatus();
  }

  absl::Status Schedule(size_t i, uint64_t step, StepPlan& plan, std::vector<size_t>& added,
                        std::vector<size_t>& running) {
    Live& l = live_[i];
    const DriverRequest& r = reqs_[i];
    if (l.finished || (!l.admitted && step < static_cast<uint64_t>(r.join_step))) {
      return absl::OkStatus();
    }
    if (!l.admitted) {
      if (!l.preempted) l.tokens = r.prompt;
      const int n = std::min<int>(r.chunk, l.tokens.size());
      TPSERVE_RETURN_IF_ERROR(TakeBlocks(l, n));
      worker::v1::NewSequence* seq = plan.add_new_sequences();
      seq->set_seq_id(i);
      seq->mutable_token_ids()->Add(l.tokens.begin(), l.tokens.end());
      if (l.preempted) seq->set_num_prompt_tokens(r.prompt.size());
      *seq->mutable_sampling() = GreedyParams(r.logprobs, l.preempted ? -1 : r.prompt_logprobs);
      seq->mutable_block_table()->Add(l.blocks.begin(), l.blocks.end());
      seq->set_num_new_tokens(n);
      l.admitted = true;
      l.computed = n;
      added.push_back(i);
    } else {
      worker::v1::SequenceDelta* delta = plan.add_running();
      delta->set_seq_id(i);
      if (l.pending) {
        delta->add_new_token_ids(*l.pending);
        l.tokens.push_back(*l.pending);
        l.pending.reset();
      }
      const int n = std::min<int>(r.chunk, l.tokens.size() - l.computed);
      const size_t old = l.blocks.size();
      TPSERVE_RETURN_IF_ERROR(TakeBlocks(l, l.computed + n));
      delta->mutable_new_block_ids()->Add(l.blocks.begin() + old, l.blocks.end());
      delta->set_num_new_tokens(n);
      l.computed += n;
      running.push_back(i);
    }
    return absl::OkStatus();
  }

  absl::Status Collect(const StepResult& result, const std::vector<size_t>& scheduled) {
    if (result.sequences_size() != static_cast<int>(scheduled.size())) {
      return absl::InternalError(absl::StrCat("step ", result.step(), ": ", result.sequences_size(),
                                              " outputs for ", scheduled.size(), " sequences"));
    }
    for (size_t k = 0; k < scheduled.size(); ++k) {
      const worker::v1::SequenceOutput& o = result.sequences(k);
      const size_t i = scheduled[k];
      Live& l = live_[i];
      if (o.seq_id() != i) return absl::InternalError("outputs out of batch order");
      for (const auto& p : o.prompt_logprobs()) out_[i].prompt_logprobs.push_back(p.chosen().logprob());
      const bool expect = l.computed == static_cast<int>(l.tokens.size());
      if (o.has_token_id() != expect) {
        return absl::InternalError(absl::StrCat("sequence ", i, ": token ",
                                                o.has_token_id() ? "sampled mid-prefill" : "missing"));
      }
      if (!expect) continue;
      l.pending = o.token_id();
      out_[i].ids.push_back(o.token_id());
      out_[i].logprobs.push_back(o.logprobs().chosen().logprob());
      if (static_cast<int>(out_[i].ids.size()) == reqs_[i].max_new_tokens) l.finished = true;
    }
    return absl::OkStatus();
  }

  const std::vector<DriverRequest>& reqs_;
  std::vector<Live> live_;
  std::vector<DriverOutput> out_;
  std::vector<int32_t> free_;
  const int block_size_;
};

}  // namespace

worker::v1::WorkerSamplingParams GreedyParams(int logprobs, int prompt_logprobs) {
  worker::v1::WorkerSamplingParams p;
  p.set_temperature(0);
  p.set_top_p(1);
  p.set_repetition_penalty(1);
  p.set_seed(7);
  p.set_logprobs(logprobs);
  p.set_prompt_logprobs(prompt_logprobs);
  return p;
}

absl::StatusOr<std::vector<DriverOutput>> RunGreedy(const StepFn& step,
                                                    const std::vector<DriverRequest>& requests,
                                                    int block_size, int num_blocks) {
  return Driver(requests, block_size, num_blocks).Run(step);
}

}  // namespace tpserve
