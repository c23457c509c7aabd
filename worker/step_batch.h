// StepBatch: one forward step over a batch that mixes prefilling and decoding sequences.
//
// Tokens of all sequences are flattened in sequence order. For sequence s, its
// num_new_tokens tokens sit at positions [context_len − num_new_tokens, context_len) and
// everything before them is already in the KV cache. The frontend builds identical
// batches for every rank; Validate() guards the worker against a malformed one.
#ifndef TPSERVE_WORKER_STEP_BATCH_H_
#define TPSERVE_WORKER_STEP_BATCH_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "worker/kv_cache.h"

namespace tpserve {

struct SequenceStep {
  int32_t num_new_tokens = 0;
  int32_t context_len = 0;           // tokens in the cache after this step
  std::vector<int32_t> block_table;  // block ids covering positions [0, context_len)
  bool all_logits = false;           // logits for every new token, else only the last
  // The sequence's prompt length (longrope picks its factor set by it,
  // RotaryEmbedding::UsesLongFactors); 0: every token counts as generated.
  int32_t num_prompt_tokens = 0;

  // The cache slot of position pos (< context_len): block_table[pos / block_size] ·
  // block_size + pos % block_size.
  int64_t SlotOf(int32_t pos, int block_size) const {
    return int64_t{block_table[pos / block_size]} * block_size + pos % block_size;
  }
};

struct StepBatch {
  std::vector<int32_t> token_ids;  // [num_tokens]
  std::vector<SequenceStep> seqs;

  // Positions of every token: [num_tokens].
  std::vector<int32_t> Positions() const;
  // Cache slot of every token: [num_tokens].
  std::vector<int64_t> Slots(int block_size) const;
  // How many logit rows Forward returns: Σ (all_logits ? num_new_tokens : 1).
  int64_t NumLogitRows() const;

  // Token counts add up, every position has a block in the table, block ids are in
  // [0, cache.num_blocks), context_len ≤ max_context.
  absl::Status Validate(const KvCacheShape& cache, int max_context) const;
};

}  // namespace tpserve

#endif  // TPSERVE_WORKER_STEP_BATCH_H_
