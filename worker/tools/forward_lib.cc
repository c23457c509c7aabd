#include "worker/tools/forward_lib.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace tpserve {

namespace {

// How many tokens of each sequence go into step `step`, given how many are done.
std::vector<int32_t> PlanStep(ForwardMode mode, int step,
                              const std::vector<std::vector<int32_t>>& seqs,
                              const std::vector<int32_t>& done) {
  std::vector<int32_t> take(seqs.size(), 0);
  for (size_t i = 0; i < seqs.size(); ++i) {
    const int32_t left = static_cast<int32_t>(seqs[i].size()) - done[i];
    if (left == 0) continue;
    switch (mode) {
      case ForwardMode::kOneShot:
        take[i] = left;
        break;
      case ForwardMode::kIncremental:
        take[i] = 1;
        break;
      case ForwardMode::kStaggered:
        if (step < static_cast<int>(i)) break;
        take[i] = done[i] == 0 ? (left + 1) / 2 : 1;
        break;
    }
  }
  return take;
}

}  // namespace

absl::StatusOr<std::vector<Tensor>> ForwardSequences(
    const LlamaModel& model, const std::vector<std::vector<int32_t>>& sequences,
    ForwardMode mode, int block_size) {
  CpuModelRunner runner(&model);
  return ForwardSequences(runner, sequences, mode, block_size);
}

absl::StatusOr<std::vector<Tensor>> ForwardSequences(
    ModelRunner& model, const std::vector<std::vector<int32_t>>& sequences,
    ForwardMode mode, int block_size) {
  const int64_t vocab = model.config().vocab_size;
  // Hand out blocks in reverse order so block tables are not the identity.
  std::vector<std::vector<int32_t>> tables(sequences.size());
  int num_blocks = 0;
  for (const auto& seq : sequences) {
    if (seq.empty()) return absl::InvalidArgumentError("a sequence has no tokens");
    num_blocks += static_cast<int>((seq.size() + block_size - 1) / block_size);
  }
  int next = num_blocks;
  for (size_t i = 0; i < sequences.size(); ++i) {
    for (size_t p = 0; p < sequences[i].size(); p += block_size) tables[i].push_back(--next);
  }
  TPSERVE_RETURN_IF_ERROR(model.AllocateCache(num_blocks, block_size));

  std::vector<std::vector<float>> logits(sequences.size());
  std::vector<int32_t> done(sequences.size(), 0);
  int64_t total_tokens = 0, tokens_done = 0;
  for (const auto& seq : sequences) total_tokens += static_cast<int64_t>(seq.size());
  for (int step = 0;; ++step) {
    const std::vector<int32_t> take = PlanStep(mode, step, sequences, done);
    StepBatch batch;
    std::vector<size_t> members;
    for (size_t i = 0; i < sequences.size(); ++i) {
      if (take[i] == 0) continue;
      batch.token_ids.insert(batch.token_ids.end(), sequences[i].begin() + done[i],
                             sequences[i].begin() + done[i] + take[i]);
      // A one-token step's only row is its last: asking for just that lets a backend
      // treat it as the decode step it is (CUDA graphs). The whole sequence is the
      // prompt, which transformers scores in one pass (longrope decides by its length).
      batch.seqs.push_back({take[i], done[i] + take[i], tables[i], /*all_logits=*/take[i] > 1,
                            static_cast<int32_t>(sequences[i].size())});
      members.push_back(i);
    }
    if (members.empty()) {
      if (tokens_done == total_tokens) break;
      continue;  // staggered: a later sequence has not joined yet
    }
    TPSERVE_ASSIGN_OR_RETURN(Tensor out, model.Forward(batch));  // [Σ take, V]
    int64_t row = 0;
    for (size_t m = 0; m < members.size(); ++m) {
      const size_t i = members[m];
      logits[i].insert(logits[i].end(), out.row(row), out.row(row) + take[i] * vocab);
      row += take[i];
      done[i] += take[i];
      tokens_done += take[i];
    }
  }
  std::vector<Tensor> result;
  for (size_t i = 0; i < sequences.size(); ++i) {
    result.emplace_back(Shape{static_cast<int64_t>(sequences[i].size()), vocab},
                        std::move(logits[i]));
  }
  return result;
}

}  // namespace tpserve
