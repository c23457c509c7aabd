// SequenceTable: one rank's view of the sequences the frontend has scheduled, derived
// from StepPlans alone (proto/tpserve/v1/worker.proto), so that every rank holds the
// same table and builds the same StepBatch.
//
// Apply() validates a whole plan against the table before changing anything: a rejected
// plan leaves the table as it was. Owned by RankExecutor; one thread.
#ifndef TPSERVE_WORKER_RANK_SEQUENCE_TABLE_H_
#define TPSERVE_WORKER_RANK_SEQUENCE_TABLE_H_

#include <cstdint>
#include <vector>

#include "absl/container/node_hash_map.h"
#include "absl/status/statusor.h"
#include "tpserve/v1/batch_limits.h"
#include "tpserve/v1/worker.pb.h"
#include "worker/sampling/sampler.h"
#include "worker/step_batch.h"

namespace tpserve {

struct SequenceState {
  std::vector<int32_t> tokens;   // prompt + generated tokens known so far
  int32_t num_prompt_tokens = 0;
  int32_t num_computed = 0;      // tokens whose KV is in the cache
  std::vector<int32_t> block_table;
  SamplingParams sampling;
  bool wants_logprobs = false;   // sampling.logprobs ≥ 0 in the plan
};

// One sequence of a step, in batch order.
struct RankSequence {
  uint64_t seq_id = 0;
  const SequenceState* state = nullptr;  // valid until the next Apply()
  int32_t first_position = 0;            // num_computed before this step
  int32_t num_new_tokens = 0;
  bool sample = false;            // this step reaches the end of the known tokens
  int32_t num_prompt_logprobs = 0;  // positions [first, first + n) score their successor
  int64_t first_row = 0;          // its first row of the step's logits
  int64_t num_rows = 0;           // num_new_tokens when all_logits, else 1
};

struct RankStep {
  StepBatch batch;
  std::vector<RankSequence> seqs;
};

struct SequenceTableLimits {
  int64_t vocab_size = 0;
  int num_blocks = 0;
  int block_size = 16;
  // Valid (ValidateBatchLimits), max_context resolved: ≥ 1. max_sequences bounds the
  // sequences held after a plan, max_batch_tokens the tokens it computes.
  BatchLimits batch = DefaultBatchLimits();
};

class SequenceTable {
 public:
  explicit SequenceTable(const SequenceTableLimits& limits) : limits_(limits) {}

  // Checks every rule of the plan (known/unknown/duplicate ids, drop before add, token
  // ids in [0, vocab), num_new_tokens within what the sequence has, block ids in range
  // and covering the context, context ≤ max_context, sampling params), then drops,
  // adds, applies deltas and marks the step's tokens computed. INVALID_ARGUMENT naming
  // the sequence and the rule; the table is unchanged then.
  absl::StatusOr<RankStep> Apply(const worker::v1::StepPlan& plan);

  size_t size() const { return seqs_.size(); }

 private:
  absl::Status Validate(const worker::v1::StepPlan& plan) const;
  absl::Status ValidateNew(const worker::v1::NewSequence& seq) const;
  absl::Status ValidateDelta(const worker::v1::SequenceDelta& delta) const;
  absl::Status ValidateTokens(absl::Span<const int32_t> ids, uint64_t seq_id) const;
  absl::Status ValidateBlocks(absl::Span<const int32_t> ids, uint64_t seq_id) const;
  absl::Status ValidateContext(int64_t context_len, int64_t num_blocks, uint64_t seq_id) const;
  RankSequence Schedule(uint64_t seq_id, SequenceState& state, int32_t num_new_tokens,
                        StepBatch& batch, int64_t& next_row);

  SequenceTableLimits limits_;
  absl::node_hash_map<uint64_t, SequenceState> seqs_;  // stable addresses
};

// The sampler's parameters for a plan's, INVALID_ARGUMENT naming the field.
absl::StatusOr<SamplingParams> ToSamplingParams(const worker::v1::WorkerSamplingParams& p,
                                                int64_t vocab_size);

}  // namespace tpserve

#endif  // TPSERVE_WORKER_RANK_SEQUENCE_TABLE_H_
