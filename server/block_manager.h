// BlockManager: the frontend's allocator of KV cache blocks for paged attention.
//
// The workers own the KV storage: num_blocks blocks of block_size token slots each. The
// frontend decides which blocks each sequence uses, here, and sends the block tables to
// the workers in StepPlans (a new sequence's table in full, then only the blocks
// appended to it). Token position p of a sequence lives in block
// block_table[p / block_size], slot p % block_size.
//
// Every failing call leaves the manager exactly as it was: no partial allocation.
// Out of blocks is RESOURCE_EXHAUSTED (the scheduler waits or preempts), an unknown or
// duplicate sequence id is a caller bug reported as NOT_FOUND / ALREADY_EXISTS.
//
// Watermark: Allocate (admitting a new sequence) keeps `watermark_blocks` blocks free,
// so that running sequences can still grow by a block each for a while before the
// scheduler must preempt. AppendSlots may use every block.
//
// Prefix caching (config.prefix_caching). A block full of computed tokens can be
// offered to the cache (CacheBlocks); its KV then outlives its sequence, and a later
// sequence whose tokens begin with the same whole blocks shares them instead of
// recomputing them (MatchPrefix, then Allocate with the matched blocks). A block's
// identity in the cache is exact: its own tokens and the cached block before it (id and
// generation, which changes whenever a block leaves the cache), so a match is a match of
// the whole prefix, never a hash's guess. Blocks are reference-counted; a cached block
// that no sequence holds stays matchable and counts as free: a new allocation takes
// never-cached blocks first, then evicts the least recently released cached ones (a
// sequence's last block before its first). Shared blocks are only ever read: the
// workers write a sequence's KV from its first uncached position, which is past every
// shared block.
//
// Thread-compatible, not thread-safe: the engine thread is its only user.
#ifndef TPSERVE_SERVER_BLOCK_MANAGER_H_
#define TPSERVE_SERVER_BLOCK_MANAGER_H_

#include <cstdint>
#include <list>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace tpserve {

struct BlockManagerConfig {
  int32_t num_blocks = 0;        // > 0
  int32_t block_size = 16;       // tokens per block, > 0
  int32_t watermark_blocks = 0;  // in [0, num_blocks)
  bool prefix_caching = false;   // keep full blocks' KV for later sequences

  absl::Status Validate() const;
};

class BlockManager {
 public:
  using SeqId = uint64_t;

  static absl::StatusOr<BlockManager> Create(const BlockManagerConfig& config);

  // Blocks needed to hold num_tokens tokens.
  int64_t BlocksFor(int64_t num_tokens) const;

  // The cached blocks holding the longest whole-block prefix of `tokens` that is at
  // most max_tokens long (none without prefix caching). Valid for Allocate until the
  // next non-const call.
  std::vector<int32_t> MatchPrefix(absl::Span<const int32_t> tokens, int64_t max_tokens) const;

  // Whether Allocate(…, num_tokens, cached) would succeed for a new sequence now.
  bool CanAllocate(int64_t num_tokens, absl::Span<const int32_t> cached = {}) const;

  // Gives a new sequence blocks for its first num_tokens (≥ 1) tokens: `cached` (from
  // MatchPrefix, shared; at most the blocks num_tokens needs) for the leading ones, new
  // blocks for the rest; block_table() then returns them.
  absl::Status Allocate(SeqId seq_id, int64_t num_tokens, absl::Span<const int32_t> cached = {});

  // Grows seq_id to new_total_tokens tokens and returns the blocks added to the end of
  // its table (none while the last block still has room). Fewer tokens than the
  // sequence already has is INVALID_ARGUMENT.
  absl::StatusOr<std::vector<int32_t>> AppendSlots(SeqId seq_id, int64_t new_total_tokens);

  // Whether AppendSlots(seq_id, new_total_tokens) would succeed now.
  bool CanAppendSlots(SeqId seq_id, int64_t new_total_tokens) const;

  // Offers seq_id's next whole blocks to the cache: `tokens` are the sequence's tokens
  // from position num_cached_blocks(seq_id) * block_size on, a whole number of blocks,
  // all with their KV computed. A block whose exact content is cached already is not
  // cached twice (the sequence's later blocks follow the cached one). Nothing without
  // prefix caching.
  absl::Status CacheBlocks(SeqId seq_id, absl::Span<const int32_t> tokens);
  // Leading blocks of seq_id that were matched in the cache or offered to it; 0 without
  // prefix caching.
  absl::StatusOr<int64_t> num_cached_blocks(SeqId seq_id) const;

  // Releases seq_id's blocks and forgets it: a block no other sequence holds becomes
  // free, and stays matchable while it is cached.
  absl::Status Free(SeqId seq_id);

  // Empties the prefix cache: no block matches afterwards. Cached blocks no sequence
  // holds become plain free blocks; held ones stay with their sequences, uncached, and
  // a sequence whose chain ran through the cache offers no further blocks (a sequence
  // with no cached block yet still does). Returns how many blocks left the cache.
  int32_t ResetPrefixCache();

  // The blocks of seq_id in position order; valid until the next non-const call.
  absl::StatusOr<absl::Span<const int32_t>> block_table(SeqId seq_id) const;
  // Tokens seq_id's blocks were last sized for.
  absl::StatusOr<int64_t> num_tokens(SeqId seq_id) const;

  bool Contains(SeqId seq_id) const { return seqs_.contains(seq_id); }
  // Blocks no sequence holds: never cached, or cached and evictable.
  int32_t num_free_blocks() const {
    return static_cast<int32_t>(free_blocks_.size() + evictable_.size());
  }
  // Blocks whose KV is matchable, held or not.
  int32_t num_cached_blocks() const { return static_cast<int32_t>(by_key_.size()); }
  int32_t num_used_blocks() const { return config_.num_blocks - num_free_blocks(); }
  int32_t num_blocks() const { return config_.num_blocks; }
  bool prefix_caching() const { return config_.prefix_caching; }
  int32_t block_size() const { return config_.block_size; }
  int64_t num_sequences() const { return static_cast<int64_t>(seqs_.size()); }

 private:
  static constexpr int32_t kNoBlock = -1;

  // A block's place in the cache chain: the cached block before it and that block's
  // generation; kNoBlock for a sequence's first block.
  struct Link {
    int32_t block = kNoBlock;
    uint32_t generation = 0;
    bool operator==(const Link& o) const { return block == o.block && generation == o.generation; }
  };

  struct Block {
    int32_t refs = 0;         // sequences holding it
    uint32_t generation = 0;  // bumped when it leaves the cache
    bool cached = false;      // in by_key_, with parent and tokens
    uint64_t key = 0;
    Link parent;
    std::vector<int32_t> tokens;
    std::list<int32_t>::iterator lru;  // in evictable_ while cached with no refs
  };

  struct Sequence {
    std::vector<int32_t> blocks;
    int64_t num_tokens = 0;
    int64_t num_cached_blocks = 0;  // leading blocks in the cache chain
    Link chain;                     // the last of them
    bool chain_closed = false;      // a hash collision ended its caching
  };

  explicit BlockManager(const BlockManagerConfig& config);

  static uint64_t Key(const Link& parent, absl::Span<const int32_t> tokens);
  // The cached block that holds exactly `tokens` after `parent`, or kNoBlock.
  int32_t Find(const Link& parent, absl::Span<const int32_t> tokens) const;
  // Blocks a call may take now: all free ones, less the watermark when admitting.
  int64_t Available(bool admitting) const;
  // Blocks from the free pool an allocation of `needed` new blocks sharing `cached`
  // takes: the new ones and the cached ones that no sequence holds.
  int64_t PoolCost(int64_t needed, absl::Span<const int32_t> cached) const;
  // Moves n blocks from the free pool to the end of table, held once each; n ≤
  // num_free_blocks(). Never-cached blocks go first, then the least recently released
  // cached ones, which leave the cache.
  void TakeBlocks(int64_t n, std::vector<int32_t>& table);
  void Evict(int32_t block);

  BlockManagerConfig config_;
  std::vector<Block> blocks_;
  // Free, never-cached (or evicted) block ids; taken from the back. Initially in
  // descending order, so that a fresh manager hands out 0, 1, 2, ...
  std::vector<int32_t> free_blocks_;
  // Cached blocks with no refs, least recently released first.
  std::list<int32_t> evictable_;
  absl::flat_hash_map<uint64_t, int32_t> by_key_;
  absl::flat_hash_map<SeqId, Sequence> seqs_;
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_BLOCK_MANAGER_H_
