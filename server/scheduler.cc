#include "server/scheduler.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace tpserve {

Scheduler::Scheduler(const BatchLimits& limits, BlockManager* blocks)
    : limits_(limits), blocks_(*blocks) {}

void Scheduler::Add(Sequence* seq) {
  seq->set_status(SequenceStatus::kWaiting);
  waiting_.push_back(seq);
}

void Scheduler::Remove(Sequence* seq) {
  running_.erase(std::remove(running_.begin(), running_.end(), seq), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), seq), waiting_.end());
  if (blocks_.Contains(seq->id())) TPSERVE_CHECK(blocks_.Free(seq->id()).ok());
  if (seq->known_to_workers()) drops_.push_back(seq->id());
  seq->MarkSent(false);
  seq->set_status(SequenceStatus::kFinished);
}

ScheduledStep Scheduler::Schedule() {
  ScheduledStep step;
  int64_t budget = std::min<int64_t>(limits_.max_batch_tokens(),
                                     std::max(token_budget_, NumDecodes() + kMinPrefillTokens));
  const int64_t group = waiting_.empty() ? INT64_MAX : GroupTokens();
  const bool preempted = !ScheduleRunning(budget, step);
  if (!preempted) AdmitWaiting(budget, group, step);
  if (step.batch.empty()) return ScheduledStep();
  step.plan.set_step(next_step_++);
  for (uint64_t id : drops_) step.plan.add_drop_seq_ids(id);
  drops_.clear();
  return step;
}

void Scheduler::CompleteStep(const ScheduledStep& step) {
  for (const ScheduledSequence& s : step.batch) {
    const int64_t computed = s.first_position + s.num_new_tokens;
    s.seq->set_num_computed_tokens(computed);
    if (!blocks_.prefix_caching()) continue;
    // Blocks that this step filled with computed KV join the prefix cache.
    const int64_t bs = blocks_.block_size();
    const absl::StatusOr<int64_t> offered = blocks_.num_cached_blocks(s.seq->id());
    TPSERVE_CHECK(offered.ok());
    if (computed / bs > *offered) {
      const std::vector<int32_t> tokens = s.seq->TokenRange(*offered * bs, computed / bs * bs);
      TPSERVE_CHECK(blocks_.CacheBlocks(s.seq->id(), tokens).ok());
    }
  }
}

bool Scheduler::ScheduleRunning(int64_t& budget, ScheduledStep& step) {
  const size_t num_running_before = running_.size();
  int64_t decodes_behind = NumDecodes();  // budget reserved for decodes not yet seen
  for (size_t i = 0; i < running_.size(); ++i) {
    Sequence* seq = running_[i];
    const int64_t uncomputed = seq->num_uncomputed_tokens();
    if (uncomputed == 1) --decodes_behind;
    int64_t count = std::min(uncomputed, budget - decodes_behind);
    if (count <= 0) continue;
    if (!MakeRoom(i)) break;
    count = std::min(count, TokensThatFit(*seq));
    const int64_t first = seq->num_computed_tokens();
    auto new_blocks = blocks_.AppendSlots(seq->id(), first + count);
    TPSERVE_CHECK(new_blocks.ok());
    worker::v1::SequenceDelta* delta = step.plan.add_running();
    delta->set_seq_id(seq->id());
    for (int32_t token : seq->TokenRange(seq->num_tokens_sent(), seq->num_tokens())) {
      delta->add_new_token_ids(token);
    }
    for (int32_t block : *new_blocks) delta->add_new_block_ids(block);
    delta->set_num_new_tokens(static_cast<int32_t>(count));
    seq->MarkSent(true);
    step.batch.push_back({seq, first, count});
    budget -= count;
  }
  return running_.size() == num_running_before;
}

void Scheduler::set_step_cost(absl::Duration fixed, absl::Duration per_token) {
  fixed_cost_ = std::max(fixed, absl::ZeroDuration());
  per_token_cost_ = std::max(per_token, absl::ZeroDuration());
}

int64_t Scheduler::GroupTokens() const {
  if (per_token_cost_ <= absl::ZeroDuration()) return INT64_MAX;
  double queued = 0;  // Q
  for (const Sequence* seq : waiting_) queued += static_cast<double>(seq->num_uncomputed_tokens());
  for (const Sequence* seq : running_) {
    const int64_t uncomputed = seq->num_uncomputed_tokens();
    if (uncomputed > 1) queued += static_cast<double>(uncomputed);
  }
  const double c = absl::ToDoubleSeconds(per_token_cost_);
  const double base = absl::ToDoubleSeconds(fixed_cost_) + c * static_cast<double>(NumDecodes());
  const double g = std::sqrt(queued * base / c);
  return g >= static_cast<double>(INT64_MAX / 2) ? INT64_MAX : static_cast<int64_t>(g);
}

void Scheduler::AdmitWaiting(int64_t& budget, int64_t group, ScheduledStep& step) {
  std::vector<ScheduledSequence> admitted;
  int64_t prefill = 0;  // this step's prompt tokens so far (running chunks, admissions)
  for (const ScheduledSequence& s : step.batch) {
    if (s.num_new_tokens > 1) prefill += s.num_new_tokens;
  }
  while (!waiting_.empty() && num_running() < limits_.max_sequences() && budget > 0) {
    Sequence* seq = waiting_.front();
    const std::vector<int32_t> tokens = seq->TokenRange(0, seq->num_tokens());
    // A cached prefix leaves at least the last token to compute (its logits are the
    // sample's), in a block of the sequence's own. Prompt logprobs need every position's
    // logits, so such a request computes its whole prompt.
    const bool looks_up = blocks_.prefix_caching() && seq->request().sampling.prompt_logprobs() < 0;
    std::vector<int32_t> cached;
    if (looks_up) cached = blocks_.MatchPrefix(tokens, seq->num_tokens() - 1);
    const int64_t num_cached = static_cast<int64_t>(cached.size()) * blocks_.block_size();
    if (looks_up && seq->num_prefix_deferrals() < kMaxPrefixDeferrals &&
        FilledThisStep(tokens, num_cached, step, admitted)) {
      // The next block it would compute is being computed now by another sequence: it
      // is cached once this step completes, so wait one step instead of computing it
      // twice (and keep FIFO order behind it).
      seq->count_prefix_deferral();
      break;
    }
    const int64_t count =
        AdmissibleTokens(std::min(seq->num_tokens() - num_cached, budget), cached);
    if (count == 0) break;
    if (prefill > 0 && prefill + count > group) break;  // the next group's (FIFO kept)
    TPSERVE_CHECK(blocks_.Allocate(seq->id(), num_cached + count, cached).ok());
    if (looks_up && seq->status() == SequenceStatus::kWaiting) {  // not a recompute
      seq->set_num_cached_prompt_tokens(num_cached);
      prefix_cache_.queried_tokens += seq->num_tokens();
      prefix_cache_.hit_tokens += num_cached;
    }
    seq->set_num_computed_tokens(num_cached);
    worker::v1::NewSequence* added = step.plan.add_new_sequences();
    added->set_seq_id(seq->id());
    for (int32_t token : tokens) added->add_token_ids(token);
    *added->mutable_sampling() = seq->request().sampling;
    absl::StatusOr<absl::Span<const int32_t>> table = blocks_.block_table(seq->id());
    TPSERVE_CHECK(table.ok());
    for (int32_t block : *table) added->add_block_table(block);
    added->set_num_cached_tokens(static_cast<int32_t>(num_cached));
    added->set_num_prompt_tokens(static_cast<int32_t>(seq->num_prompt_tokens()));
    added->set_num_new_tokens(static_cast<int32_t>(count));
    seq->MarkSent(true);
    seq->set_status(SequenceStatus::kRunning);
    waiting_.pop_front();
    running_.push_back(seq);
    admitted.push_back({seq, num_cached, count});
    budget -= count;
    prefill += count;
  }
  step.batch.insert(step.batch.begin(), admitted.begin(), admitted.end());
}

bool Scheduler::MakeRoom(size_t index) {
  Sequence* seq = running_[index];
  while (TokensThatFit(*seq) < 1) {
    Sequence* victim = running_.back();
    Preempt(victim);
    if (victim == seq) return false;
  }
  return true;
}

void Scheduler::Preempt(Sequence* seq) {
  TPSERVE_CHECK(!running_.empty() && running_.back() == seq);
  running_.pop_back();
  TPSERVE_CHECK(blocks_.Free(seq->id()).ok());
  if (seq->known_to_workers()) drops_.push_back(seq->id());
  seq->MarkSent(false);
  seq->set_num_computed_tokens(0);
  seq->set_status(SequenceStatus::kPreempted);
  waiting_.push_front(seq);
  ++preemptions_;
}

int64_t Scheduler::TokensThatFit(const Sequence& seq) const {
  auto table = blocks_.block_table(seq.id());
  TPSERVE_CHECK(table.ok());
  const int64_t blocks = static_cast<int64_t>(table->size()) + blocks_.num_free_blocks();
  return blocks * blocks_.block_size() - seq.num_computed_tokens();
}

int64_t Scheduler::AdmissibleTokens(int64_t limit, absl::Span<const int32_t> cached) const {
  const int64_t num_cached = static_cast<int64_t>(cached.size()) * blocks_.block_size();
  for (int64_t n = limit; n > 0; n = (blocks_.BlocksFor(n) - 1) * blocks_.block_size()) {
    if (blocks_.CanAllocate(num_cached + n, cached)) return n;
  }
  return 0;
}

bool Scheduler::FilledThisStep(absl::Span<const int32_t> tokens, int64_t num_cached,
                               const ScheduledStep& step,
                               absl::Span<const ScheduledSequence> admitted) const {
  const int64_t end = num_cached + blocks_.block_size();            // the next block's end
  if (end > static_cast<int64_t>(tokens.size()) - 1) return false;  // would not be shared
  const absl::Span<const int32_t> prefix = tokens.subspan(0, end);
  for (absl::Span<const ScheduledSequence> part : {absl::MakeConstSpan(step.batch), admitted}) {
    for (const ScheduledSequence& s : part) {
      if (s.first_position >= end || s.first_position + s.num_new_tokens < end) continue;
      if (s.seq->StartsWith(prefix)) return true;
    }
  }
  return false;
}

int64_t Scheduler::NumDecodes() const {
  return std::count_if(running_.begin(), running_.end(),
                       [](const Sequence* seq) { return seq->num_uncomputed_tokens() == 1; });
}

}  // namespace tpserve
