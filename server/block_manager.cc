#include "server/block_manager.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tpserve {

absl::Status BlockManagerConfig::Validate() const {
  if (num_blocks <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("block manager: num_blocks must be > 0, got ", num_blocks));
  }
  if (block_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("block manager: block_size must be > 0, got ", block_size));
  }
  if (watermark_blocks < 0 || watermark_blocks >= num_blocks) {
    return absl::InvalidArgumentError(
        absl::StrCat("block manager: watermark_blocks must be in [0, num_blocks = ",
                     num_blocks, "), got ", watermark_blocks));
  }
  return absl::OkStatus();
}

absl::StatusOr<BlockManager> BlockManager::Create(const BlockManagerConfig& config) {
  if (absl::Status s = config.Validate(); !s.ok()) return s;
  return BlockManager(config);
}

BlockManager::BlockManager(const BlockManagerConfig& config) : config_(config) {
  free_blocks_.reserve(config.num_blocks);
  for (int32_t id = config.num_blocks - 1; id >= 0; --id) free_blocks_.push_back(id);
}

int64_t BlockManager::BlocksFor(int64_t num_tokens) const {
  if (num_tokens <= 0) return 0;
  return (num_tokens + config_.block_size - 1) / config_.block_size;
}

int64_t BlockManager::Available(bool admitting) const {
  return num_free_blocks() - (admitting ? config_.watermark_blocks : 0);
}

bool BlockManager::CanAllocate(int64_t num_tokens) const {
  return num_tokens > 0 && BlocksFor(num_tokens) <= Available(/*admitting=*/true);
}

absl::Status BlockManager::Allocate(SeqId seq_id, int64_t num_tokens) {
  if (num_tokens <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "block manager: sequence ", seq_id, " needs ≥ 1 token, got ", num_tokens));
  }
  if (seqs_.contains(seq_id)) {
    return absl::AlreadyExistsError(
        absl::StrCat("block manager: sequence ", seq_id, " already has blocks"));
  }
  const int64_t needed = BlocksFor(num_tokens);
  if (needed > Available(/*admitting=*/true)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "block manager: sequence ", seq_id, " needs ", needed, " blocks for ", num_tokens,
        " tokens; ", num_free_blocks(), " free, ", config_.watermark_blocks,
        " kept for running sequences"));
  }
  Sequence& seq = seqs_[seq_id];
  TakeBlocks(needed, seq.blocks);
  seq.num_tokens = num_tokens;
  return absl::OkStatus();
}

bool BlockManager::CanAppendSlots(SeqId seq_id, int64_t new_total_tokens) const {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end() || new_total_tokens < it->second.num_tokens) return false;
  const int64_t extra =
      BlocksFor(new_total_tokens) - static_cast<int64_t>(it->second.blocks.size());
  return extra <= Available(/*admitting=*/false);
}

absl::StatusOr<std::vector<int32_t>> BlockManager::AppendSlots(SeqId seq_id,
                                                               int64_t new_total_tokens) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) {
    return absl::NotFoundError(
        absl::StrCat("block manager: AppendSlots of unknown sequence ", seq_id));
  }
  Sequence& seq = it->second;
  if (new_total_tokens < seq.num_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "block manager: sequence ", seq_id, " cannot shrink from ", seq.num_tokens,
        " to ", new_total_tokens, " tokens"));
  }
  const int64_t extra = BlocksFor(new_total_tokens) - static_cast<int64_t>(seq.blocks.size());
  if (extra > Available(/*admitting=*/false)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("block manager: sequence ", seq_id, " needs ", extra,
                     " more blocks; ", num_free_blocks(), " free"));
  }
  const size_t old_size = seq.blocks.size();
  if (extra > 0) TakeBlocks(extra, seq.blocks);
  seq.num_tokens = new_total_tokens;
  return std::vector<int32_t>(seq.blocks.begin() + old_size, seq.blocks.end());
}

absl::Status BlockManager::Free(SeqId seq_id) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) {
    return absl::NotFoundError(
        absl::StrCat("block manager: Free of unknown sequence ", seq_id));
  }
  // Returned in reverse so that the sequence's first block is the next one handed out.
  const std::vector<int32_t>& blocks = it->second.blocks;
  free_blocks_.insert(free_blocks_.end(), blocks.rbegin(), blocks.rend());
  seqs_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<absl::Span<const int32_t>> BlockManager::block_table(SeqId seq_id) const {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) {
    return absl::NotFoundError(absl::StrCat("block manager: unknown sequence ", seq_id));
  }
  return absl::Span<const int32_t>(it->second.blocks);
}

absl::StatusOr<int64_t> BlockManager::num_tokens(SeqId seq_id) const {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) {
    return absl::NotFoundError(absl::StrCat("block manager: unknown sequence ", seq_id));
  }
  return it->second.num_tokens;
}

void BlockManager::TakeBlocks(int64_t n, std::vector<int32_t>& table) {
  table.insert(table.end(), free_blocks_.end() - n, free_blocks_.end());
  // The back of the pool is taken in pop order (last element first).
  std::reverse(table.end() - n, table.end());
  free_blocks_.resize(free_blocks_.size() - n);
}

}  // namespace tpserve
