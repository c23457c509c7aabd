#include "worker/step_batch.h"

#include "absl/strings/str_cat.h"

namespace tpserve {

std::vector<int32_t> StepBatch::Positions() const {
  std::vector<int32_t> positions;
  positions.reserve(token_ids.size());
  for (const SequenceStep& s : seqs) {
    for (int32_t i = 0; i < s.num_new_tokens; ++i) {
      positions.push_back(s.context_len - s.num_new_tokens + i);
    }
  }
  return positions;
}

std::vector<int64_t> StepBatch::Slots(int block_size) const {
  std::vector<int64_t> slots;
  slots.reserve(token_ids.size());
  for (const SequenceStep& s : seqs) {
    for (int32_t p = s.context_len - s.num_new_tokens; p < s.context_len; ++p) {
      slots.push_back(s.SlotOf(p, block_size));
    }
  }
  return slots;
}

int64_t StepBatch::NumLogitRows() const {
  int64_t rows = 0;
  for (const SequenceStep& s : seqs) rows += s.all_logits ? s.num_new_tokens : 1;
  return rows;
}

absl::Status StepBatch::Validate(const KvCacheShape& cache, int max_context) const {
  int64_t total = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const SequenceStep& s = seqs[i];
    if (s.num_new_tokens <= 0 || s.context_len < s.num_new_tokens) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", i, ": num_new_tokens=", s.num_new_tokens,
                       " must be in [1, context_len=", s.context_len, "]"));
    }
    if (s.context_len > max_context) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", i, ": context_len=",
                                                     s.context_len, " exceeds ", max_context));
    }
    const int64_t blocks_needed = (int64_t{s.context_len} + cache.block_size - 1) / cache.block_size;
    if (static_cast<int64_t>(s.block_table.size()) < blocks_needed) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", i, ": block table has ",
                                                     s.block_table.size(), " blocks, needs ",
                                                     blocks_needed));
    }
    for (int32_t b : s.block_table) {
      if (b < 0 || b >= cache.num_blocks) {
        return absl::InvalidArgumentError(absl::StrCat(
            "sequence ", i, ": block id ", b, " outside [0, ", cache.num_blocks, ")"));
      }
    }
    total += s.num_new_tokens;
  }
  if (total != static_cast<int64_t>(token_ids.size())) {
    return absl::InvalidArgumentError(absl::StrCat("sequences hold ", total, " new tokens but ",
                                                   token_ids.size(), " token ids were sent"));
  }
  return absl::OkStatus();
}

}  // namespace tpserve
