#include "worker/rank/rank_executor.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "tpserve/v1/batch_limits.h"
#include "worker/sampling/sampler.h"

namespace tpserve {

using worker::v1::PositionLogprobs;
using worker::v1::SequenceOutput;
using worker::v1::StepPlan;
using worker::v1::StepResult;

namespace {

void ToProto(const SampleResult& r, PositionLogprobs* out) {
  out->mutable_chosen()->set_token_id(r.token);
  out->mutable_chosen()->set_logprob(r.logprob);
  for (const TopToken& t : r.top) {
    worker::v1::Logprob* lp = out->add_top();
    lp->set_token_id(t.token);
    lp->set_logprob(t.logprob);
  }
}

// One sequence's failure, reported in its output instead of failing the step: nothing
// else of it is sent.
void SetError(const absl::Status& status, SequenceOutput* out) {
  out->clear_token_id();
  out->clear_logprobs();
  out->clear_prompt_logprobs();
  out->mutable_error()->set_code(static_cast<int32_t>(status.code()));
  out->mutable_error()->set_message(std::string(status.message()));
}

}  // namespace

absl::Status RankExecutorOptions::Validate() const {
  if (block_size < 1) return absl::InvalidArgumentError("kv block_size must be ≥ 1");
  if (num_blocks < 1) return absl::InvalidArgumentError("kv num_blocks must be ≥ 1");
  return ValidateBatchLimits(limits, "rank options: limits");
}

absl::StatusOr<std::unique_ptr<RankExecutor>> RankExecutor::Create(
    std::unique_ptr<CommGroup> comm, std::unique_ptr<ModelRunner> model,
    const RankExecutorOptions& options) {
  TPSERVE_RETURN_IF_ERROR(options.Validate());
  if (comm == nullptr || model == nullptr) {
    return absl::InvalidArgumentError("RankExecutor needs a CommGroup and a model");
  }
  TPSERVE_RETURN_IF_ERROR(model->AllocateCache(options.num_blocks, options.block_size));
  const KvCacheShape& shape = model->cache_shape();
  SequenceTableLimits limits;
  limits.vocab_size = model->config().vocab_size;
  limits.num_blocks = shape.num_blocks;
  limits.block_size = shape.block_size;
  limits.batch = options.limits;
  TPSERVE_ASSIGN_OR_RETURN(
      const int max_context,
      ResolveMaxContext(options.limits, model->config().max_position_embeddings,
                        "rank options: limits"));
  limits.batch.set_max_context(max_context);
  return std::unique_ptr<RankExecutor>(new RankExecutor(std::move(comm), std::move(model), limits));
}

RankExecutor::RankExecutor(std::unique_ptr<CommGroup> comm, std::unique_ptr<ModelRunner> model,
                           const SequenceTableLimits& limits)
    : comm_(std::move(comm)), model_(std::move(model)), limits_(limits), table_(limits) {}

absl::StatusOr<StepResult> RankExecutor::Execute(const StepPlan& plan) {
  if (!broken_.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", rank(), " is unusable after an earlier failure: ", broken_.message()));
  }
  if (plan.step() != last_step_ + 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("step ", plan.step(), " received, expected step ", last_step_ + 1));
  }
  const absl::Time start = absl::Now();
  TPSERVE_ASSIGN_OR_RETURN(StepResult result, Run(plan));
  result.set_compute_time_us(absl::ToInt64Microseconds(absl::Now() - start));
  return result;
}

absl::StatusOr<StepResult> RankExecutor::Run(const StepPlan& plan) {
  absl::StatusOr<RankStep> step = table_.Apply(plan);
  if (!step.ok()) {
    return absl::Status(step.status().code(),
                        absl::StrCat("step ", plan.step(), ": ", step.status().message()));
  }
  last_step_ = plan.step();  // the table has moved on: this step is consumed
  StepResult result;
  result.set_step(plan.step());
  if (step->seqs.empty()) return result;  // a plan that only drops
  absl::Status s = step->batch.Validate(model_->cache_shape(), limits_.batch.max_context());
  absl::StatusOr<std::unique_ptr<StepLogits>> logits =
      s.ok() ? model_->ForwardForSampling(step->batch, /*sampling=*/rank() == 0) : s;
  if (logits.ok() && rank() == 0) s = FillOutputs(*step, **logits, &result);
  if (!logits.ok()) s = logits.status();
  if (!s.ok()) {
    broken_ = s;
    return absl::Status(s.code(), absl::StrCat("step ", plan.step(), ": ", s.message()));
  }
  return result;
}

absl::Status RankExecutor::FillOutputs(const RankStep& step, StepLogits& logits,
                                       StepResult* result) const {
  std::vector<SampleRequest> requests;
  std::vector<SequenceOutput*> sampled;
  std::vector<bool> wants_logprobs;
  for (const RankSequence& seq : step.seqs) {
    SequenceOutput* out = result->add_sequences();
    out->set_seq_id(seq.seq_id);
    const SequenceState& state = *seq.state;
    const absl::Span<const int32_t> tokens(state.tokens);
    if (seq.num_prompt_logprobs > 0) {
      absl::StatusOr<std::vector<SampleResult>> scored = logits.PromptLogprobs(
          seq.first_row, tokens.subspan(seq.first_position + 1, seq.num_prompt_logprobs),
          *state.sampling.prompt_logprobs);
      if (!scored.ok()) {  // its own rows (not finite): this sequence alone fails
        SetError(scored.status(), out);
        continue;
      }
      for (const SampleResult& r : *scored) ToProto(r, out->add_prompt_logprobs());
    }
    if (!seq.sample) continue;
    SampleRequest req;
    req.row = seq.first_row + seq.num_rows - 1;
    req.params = state.sampling;
    req.prompt_tokens = tokens.subspan(0, state.num_prompt_tokens);
    req.output_tokens = tokens.subspan(state.num_prompt_tokens);
    requests.push_back(req);
    sampled.push_back(out);
    wants_logprobs.push_back(state.wants_logprobs);
  }
  if (requests.empty()) return absl::OkStatus();
  TPSERVE_ASSIGN_OR_RETURN(std::vector<SampleResult> samples, logits.Sample(requests));
  for (size_t i = 0; i < sampled.size(); ++i) {
    if (!samples[i].status.ok()) {
      SetError(samples[i].status, sampled[i]);
      continue;
    }
    sampled[i]->set_token_id(samples[i].token);
    if (wants_logprobs[i]) ToProto(samples[i], sampled[i]->mutable_logprobs());
  }
  return absl::OkStatus();
}

}  // namespace tpserve
