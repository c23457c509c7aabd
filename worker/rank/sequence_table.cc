#include "worker/rank/sequence_table.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace tpserve {

using worker::v1::NewSequence;
using worker::v1::SequenceDelta;
using worker::v1::StepPlan;

namespace {

absl::Status SeqError(uint64_t seq_id, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("sequence ", seq_id, ": ", what));
}

template <typename T>
absl::Span<const T> AsSpan(const google::protobuf::RepeatedField<T>& f) {
  return absl::MakeConstSpan(f.data(), f.size());
}

}  // namespace

absl::StatusOr<SamplingParams> ToSamplingParams(const worker::v1::WorkerSamplingParams& p,
                                                int64_t vocab_size) {
  SamplingParams s;
  s.temperature = p.temperature();
  s.top_k = p.top_k();
  s.top_p = p.top_p();
  s.min_p = p.min_p();
  s.repetition_penalty = p.repetition_penalty();
  s.presence_penalty = p.presence_penalty();
  s.frequency_penalty = p.frequency_penalty();
  s.seed = p.seed();
  // -1 means "none"; any other value is a top-n that Validate() range-checks.
  s.logprobs = p.logprobs() == -1 ? 0 : p.logprobs();
  if (p.prompt_logprobs() != -1) s.prompt_logprobs = p.prompt_logprobs();
  TPSERVE_RETURN_IF_ERROR(s.Validate(vocab_size));
  return s;
}

absl::Status SequenceTable::ValidateTokens(absl::Span<const int32_t> ids, uint64_t seq_id) const {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= limits_.vocab_size) {
      return SeqError(seq_id, absl::StrCat("token id ", ids[i], " at index ", i,
                                           " is outside [0, ", limits_.vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status SequenceTable::ValidateBlocks(absl::Span<const int32_t> ids, uint64_t seq_id) const {
  for (int32_t b : ids) {
    if (b < 0 || b >= limits_.num_blocks) {
      return SeqError(seq_id,
                      absl::StrCat("block id ", b, " is outside [0, ", limits_.num_blocks, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status SequenceTable::ValidateContext(int64_t context_len, int64_t num_blocks,
                                            uint64_t seq_id) const {
  if (context_len > limits_.batch.max_context()) {
    return SeqError(seq_id, absl::StrCat("context of ", context_len, " tokens exceeds max_context ",
                                         limits_.batch.max_context()));
  }
  if (num_blocks * limits_.block_size < context_len) {
    return SeqError(seq_id, absl::StrCat("block table of ", num_blocks, " blocks cannot hold ",
                                         context_len, " tokens"));
  }
  return absl::OkStatus();
}

absl::Status SequenceTable::ValidateNew(const NewSequence& seq) const {
  const uint64_t id = seq.seq_id();
  const int64_t len = seq.token_ids_size();
  if (len == 0) return SeqError(id, "new sequence has no token_ids");
  TPSERVE_RETURN_IF_ERROR(ValidateTokens(AsSpan(seq.token_ids()), id));
  if (seq.num_prompt_tokens() < 0 || seq.num_prompt_tokens() > len) {
    return SeqError(id, absl::StrCat("num_prompt_tokens=", seq.num_prompt_tokens(),
                                     " is outside [0, ", len, "]"));
  }
  if (seq.num_cached_tokens() < 0 || seq.num_new_tokens() < 1 ||
      int64_t{seq.num_cached_tokens()} + seq.num_new_tokens() > len) {
    return SeqError(id, absl::StrCat("num_cached_tokens=", seq.num_cached_tokens(),
                                     " + num_new_tokens=", seq.num_new_tokens(),
                                     " must be ≤ its ", len, " tokens, with num_new_tokens ≥ 1"));
  }
  absl::StatusOr<SamplingParams> params = ToSamplingParams(seq.sampling(), limits_.vocab_size);
  if (!params.ok()) return SeqError(id, std::string(params.status().message()));
  TPSERVE_RETURN_IF_ERROR(ValidateBlocks(AsSpan(seq.block_table()), id));
  return ValidateContext(int64_t{seq.num_cached_tokens()} + seq.num_new_tokens(),
                         seq.block_table_size(), id);
}

absl::Status SequenceTable::ValidateDelta(const SequenceDelta& delta) const {
  const uint64_t id = delta.seq_id();
  const SequenceState& state = seqs_.at(id);
  TPSERVE_RETURN_IF_ERROR(ValidateTokens(AsSpan(delta.new_token_ids()), id));
  TPSERVE_RETURN_IF_ERROR(ValidateBlocks(AsSpan(delta.new_block_ids()), id));
  const int64_t known = static_cast<int64_t>(state.tokens.size());
  if (delta.new_token_ids_size() > 0 && state.num_computed != known) {
    return SeqError(id, absl::StrCat("new_token_ids sent while ", known - state.num_computed,
                                     " earlier tokens are not yet computed"));
  }
  const int64_t pending = known + delta.new_token_ids_size() - state.num_computed;
  if (delta.num_new_tokens() < 1 || delta.num_new_tokens() > pending) {
    return SeqError(id, absl::StrCat("num_new_tokens=", delta.num_new_tokens(), " must be in [1, ",
                                     pending, "] (tokens not yet computed)"));
  }
  return ValidateContext(int64_t{state.num_computed} + delta.num_new_tokens(),
                         static_cast<int64_t>(state.block_table.size()) + delta.new_block_ids_size(),
                         id);
}

absl::Status SequenceTable::Validate(const StepPlan& plan) const {
  absl::flat_hash_set<uint64_t> dropped, added, running;
  for (uint64_t id : plan.drop_seq_ids()) {
    if (!seqs_.contains(id)) return SeqError(id, "drop_seq_ids names an unknown sequence");
    if (!dropped.insert(id).second) return SeqError(id, "dropped twice");
  }
  int64_t batch_tokens = 0;
  for (const NewSequence& seq : plan.new_sequences()) {
    const uint64_t id = seq.seq_id();
    if (seqs_.contains(id) && !dropped.contains(id)) {
      return SeqError(id, "sent as new but already held (drop it first)");
    }
    if (!added.insert(id).second) return SeqError(id, "listed twice in new_sequences");
    TPSERVE_RETURN_IF_ERROR(ValidateNew(seq));
    batch_tokens += seq.num_new_tokens();
  }
  for (const SequenceDelta& delta : plan.running()) {
    const uint64_t id = delta.seq_id();
    if (!seqs_.contains(id) || dropped.contains(id)) {
      return SeqError(id, "running names an unknown or dropped sequence");
    }
    if (added.contains(id)) return SeqError(id, "listed both as new and as running");
    if (!running.insert(id).second) return SeqError(id, "listed twice in running");
    TPSERVE_RETURN_IF_ERROR(ValidateDelta(delta));
    batch_tokens += delta.num_new_tokens();
  }
  const int64_t held = static_cast<int64_t>(seqs_.size() - dropped.size() + added.size());
  if (held > limits_.batch.max_sequences()) {
    return absl::InvalidArgumentError(absl::StrCat("the plan leaves ", held,
                                                   " sequences held, over max_sequences ",
                                                   limits_.batch.max_sequences()));
  }
  if (batch_tokens > limits_.batch.max_batch_tokens()) {
    return absl::InvalidArgumentError(absl::StrCat("the plan computes ", batch_tokens,
                                                   " tokens, over max_batch_tokens ",
                                                   limits_.batch.max_batch_tokens()));
  }
  return absl::OkStatus();
}

RankSequence SequenceTable::Schedule(uint64_t seq_id, SequenceState& state,
                                     int32_t num_new_tokens, StepBatch& batch,
                                     int64_t& next_row) {
  RankSequence s;
  s.seq_id = seq_id;
  s.state = &state;
  s.first_position = state.num_computed;
  s.num_new_tokens = num_new_tokens;
  const int32_t end = state.num_computed + num_new_tokens;
  s.sample = end == static_cast<int32_t>(state.tokens.size());
  if (state.sampling.prompt_logprobs.has_value()) {
    // Position j scores prompt token j + 1, so the last prompt position scores nothing.
    s.num_prompt_logprobs = std::max(0, std::min(end, state.num_prompt_tokens - 1) - s.first_position);
  }
  const bool all_logits = s.num_prompt_logprobs > 0;
  batch.token_ids.insert(batch.token_ids.end(), state.tokens.begin() + s.first_position,
                         state.tokens.begin() + end);
  batch.seqs.push_back(
      {num_new_tokens, end, state.block_table, all_logits, state.num_prompt_tokens});
  s.first_row = next_row;
  s.num_rows = all_logits ? num_new_tokens : 1;
  next_row += s.num_rows;
  state.num_computed = end;
  return s;
}

absl::StatusOr<RankStep> SequenceTable::Apply(const StepPlan& plan) {
  TPSERVE_RETURN_IF_ERROR(Validate(plan));
  for (uint64_t id : plan.drop_seq_ids()) seqs_.erase(id);
  RankStep step;
  int64_t next_row = 0;
  for (const NewSequence& seq : plan.new_sequences()) {
    SequenceState& state = seqs_[seq.seq_id()];
    state.tokens.assign(seq.token_ids().begin(), seq.token_ids().end());
    state.num_prompt_tokens =
        seq.num_prompt_tokens() == 0 ? seq.token_ids_size() : seq.num_prompt_tokens();
    state.num_computed = seq.num_cached_tokens();
    state.block_table.assign(seq.block_table().begin(), seq.block_table().end());
    state.sampling = *ToSamplingParams(seq.sampling(), limits_.vocab_size);
    state.wants_logprobs = seq.sampling().logprobs() >= 0;
    step.seqs.push_back(Schedule(seq.seq_id(), state, seq.num_new_tokens(), step.batch, next_row));
  }
  for (const SequenceDelta& delta : plan.running()) {
    SequenceState& state = seqs_.at(delta.seq_id());
    state.tokens.insert(state.tokens.end(), delta.new_token_ids().begin(),
                        delta.new_token_ids().end());
    state.block_table.insert(state.block_table.end(), delta.new_block_ids().begin(),
                             delta.new_block_ids().end());
    step.seqs.push_back(
        Schedule(delta.seq_id(), state, delta.num_new_tokens(), step.batch, next_row));
  }
  return step;
}

}  // namespace tpserve
