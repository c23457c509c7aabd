#include "server/block_manager.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

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
  TPSERVE_RETURN_IF_ERROR(config.Validate());
  return BlockManager(config);
}

BlockManager::BlockManager(const BlockManagerConfig& config)
    : config_(config), blocks_(config.num_blocks) {
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

uint64_t BlockManager::Key(const Link& parent, absl::Span<const int32_t> tokens) {
  return absl::Hash<std::tuple<int32_t, uint32_t, absl::Span<const int32_t>>>()(
      std::make_tuple(parent.block, parent.generation, tokens));
}

int32_t BlockManager::Find(const Link& parent, absl::Span<const int32_t> tokens) const {
  auto it = by_key_.find(Key(parent, tokens));
  if (it == by_key_.end()) return kNoBlock;
  const Block& block = blocks_[it->second];
  if (!(block.parent == parent) || absl::MakeConstSpan(block.tokens) != tokens) return kNoBlock;
  return it->second;
}

std::vector<int32_t> BlockManager::MatchPrefix(absl::Span<const int32_t> tokens,
                                               int64_t max_tokens) const {
  std::vector<int32_t> matched;
  if (!config_.prefix_caching) return matched;
  const int64_t bs = config_.block_size;
  const int64_t whole = std::min<int64_t>(max_tokens, tokens.size()) / bs;
  Link parent;
  for (int64_t i = 0; i < whole; ++i) {
    const int32_t block = Find(parent, tokens.subspan(i * bs, bs));
    if (block == kNoBlock) break;
    matched.push_back(block);
    parent = {block, blocks_[block].generation};
  }
  return matched;
}

int64_t BlockManager::PoolCost(int64_t needed, absl::Span<const int32_t> cached) const {
  int64_t cost = needed;
  for (int32_t block : cached) cost += blocks_[block].refs == 0 ? 1 : 0;
  return cost;
}

bool BlockManager::CanAllocate(int64_t num_tokens, absl::Span<const int32_t> cached) const {
  for (int32_t block : cached) {
    if (block < 0 || block >= config_.num_blocks || !blocks_[block].cached) return false;
  }
  const int64_t needed = BlocksFor(num_tokens) - static_cast<int64_t>(cached.size());
  return num_tokens > 0 && needed >= 0 && PoolCost(needed, cached) <= Available(true);
}

absl::Status BlockManager::Allocate(SeqId seq_id, int64_t num_tokens,
                                    absl::Span<const int32_t> cached) {
  if (num_tokens <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "block manager: sequence ", seq_id, " needs ≥ 1 token, got ", num_tokens));
  }
  if (seqs_.contains(seq_id)) {
    return absl::AlreadyExistsError(
        absl::StrCat("block manager: sequence ", seq_id, " already has blocks"));
  }
  const int64_t needed = BlocksFor(num_tokens) - static_cast<int64_t>(cached.size());
  if (needed < 0) {
    return absl::InvalidArgumentError(absl::StrCat("block manager: sequence ", seq_id, " shares ",
                                                   cached.size(), " cached blocks but holds only ",
                                                   num_tokens, " tokens"));
  }
  for (int32_t block : cached) {
    if (block < 0 || block >= config_.num_blocks || !blocks_[block].cached) {
      return absl::InvalidArgumentError(absl::StrCat("block manager: sequence ", seq_id,
                                                     " shares block ", block, ", not cached"));
    }
  }
  const int64_t cost = PoolCost(needed, cached);
  if (cost > Available(/*admitting=*/true)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("block manager: sequence ", seq_id, " needs ", cost, " blocks for ",
                     num_tokens, " tokens; ", num_free_blocks(), " free, ",
                     config_.watermark_blocks, " kept for running sequences"));
  }
  Sequence& seq = seqs_[seq_id];
  for (int32_t id : cached) {
    Block& block = blocks_[id];
    if (block.refs++ == 0) evictable_.erase(block.lru);
    seq.blocks.push_back(id);
    seq.chain = {id, block.generation};
  }
  seq.num_cached_blocks = static_cast<int64_t>(cached.size());
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

absl::Status BlockManager::CacheBlocks(SeqId seq_id, absl::Span<const int32_t> tokens) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) {
    return absl::NotFoundError(
        absl::StrCat("block manager: CacheBlocks of unknown sequence ", seq_id));
  }
  Sequence& seq = it->second;
  const int64_t bs = config_.block_size;
  const int64_t count = static_cast<int64_t>(tokens.size()) / bs;
  if (static_cast<int64_t>(tokens.size()) % bs != 0 ||
      seq.num_cached_blocks + count > static_cast<int64_t>(seq.blocks.size()) ||
      (seq.num_cached_blocks + count) * bs > seq.num_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("block manager: sequence ", seq_id, " offers ", tokens.size(),
                     " tokens after its ", seq.num_cached_blocks, " cached blocks; it has ",
                     seq.blocks.size(), " blocks of ", bs, " for ", seq.num_tokens, " tokens"));
  }
  if (!config_.prefix_caching) return absl::OkStatus();
  for (int64_t i = 0; i < count; ++i) {
    if (seq.chain_closed) {
      ++seq.num_cached_blocks;
      continue;
    }
    const absl::Span<const int32_t> content = tokens.subspan(i * bs, bs);
    const int32_t id = seq.blocks[seq.num_cached_blocks];
    int32_t chained = Find(seq.chain, content);
    if (chained == kNoBlock) {
      const uint64_t key = Key(seq.chain, content);
      if (by_key_.contains(key)) {  // another content under the same hash: stop here
        seq.chain_closed = true;
        ++seq.num_cached_blocks;
        continue;
      }
      Block& block = blocks_[id];
      block.cached = true;
      block.key = key;
      block.parent = seq.chain;
      block.tokens.assign(content.begin(), content.end());
      by_key_.emplace(key, id);
      chained = id;
    }
    // A duplicate of a cached block stays uncached; later blocks follow the cached one.
    seq.chain = {chained, blocks_[chained].generation};
    ++seq.num_cached_blocks;
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> BlockManager::num_cached_blocks(SeqId seq_id) const {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) {
    return absl::NotFoundError(absl::StrCat("block manager: unknown sequence ", seq_id));
  }
  return it->second.num_cached_blocks;
}

absl::Status BlockManager::Free(SeqId seq_id) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) {
    return absl::NotFoundError(
        absl::StrCat("block manager: Free of unknown sequence ", seq_id));
  }
  // Released last block first: a never-cached first block is the next one handed out,
  // and a cached last block is evicted before the ones in front of it.
  const std::vector<int32_t>& table = it->second.blocks;
  for (auto b = table.rbegin(); b != table.rend(); ++b) {
    Block& block = blocks_[*b];
    if (--block.refs > 0) continue;
    if (block.cached) {
      block.lru = evictable_.insert(evictable_.end(), *b);
    } else {
      free_blocks_.push_back(*b);
    }
  }
  seqs_.erase(it);
  return absl::OkStatus();
}

int32_t BlockManager::ResetPrefixCache() {
  const int32_t dropped = num_cached_blocks();
  while (!evictable_.empty()) {
    const int32_t id = evictable_.front();
    Evict(id);
    free_blocks_.push_back(id);
  }
  // What is left in the cache is held: it leaves the cache as Evict would have it, and
  // returns to the free pool when its last holder frees it.
  for (const auto& [key, id] : by_key_) {
    Block& block = blocks_[id];
    block.cached = false;
    block.tokens.clear();
    block.parent = Link();
    ++block.generation;
  }
  by_key_.clear();
  for (auto& [id, seq] : seqs_) {
    if (seq.num_cached_blocks > 0) seq.chain_closed = true;
  }
  return dropped;
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
  const int64_t fresh = std::min<int64_t>(n, free_blocks_.size());
  table.insert(table.end(), free_blocks_.end() - fresh, free_blocks_.end());
  // The back of the pool is taken in pop order (last element first).
  std::reverse(table.end() - fresh, table.end());
  free_blocks_.resize(free_blocks_.size() - fresh);
  for (int64_t i = fresh; i < n; ++i) {
    const int32_t id = evictable_.front();
    Evict(id);
    table.push_back(id);
  }
  for (auto b = table.end() - n; b != table.end(); ++b) blocks_[*b].refs = 1;
}

void BlockManager::Evict(int32_t id) {
  Block& block = blocks_[id];
  evictable_.erase(block.lru);
  by_key_.erase(block.key);
  block.cached = false;
  block.tokens.clear();
  block.parent = Link();
  ++block.generation;  // blocks cached after it no longer match through it
}

}  // namespace tpserve
