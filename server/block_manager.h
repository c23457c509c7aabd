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
// Thread-compatible, not thread-safe: the engine thread is its only user.
#ifndef TPSERVE_SERVER_BLOCK_MANAGER_H_
#define TPSERVE_SERVER_BLOCK_MANAGER_H_

#include <cstdint>
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

  absl::Status Validate() const;
};

class BlockManager {
 public:
  using SeqId = uint64_t;

  static absl::StatusOr<BlockManager> Create(const BlockManagerConfig& config);

  // Blocks needed to hold num_tokens tokens.
  int64_t BlocksFor(int64_t num_tokens) const;

  // Whether Allocate(…, num_tokens) would succeed for a new sequence now.
  bool CanAllocate(int64_t num_tokens) const;

  // Gives a new sequence blocks for its first num_tokens (≥ 1) tokens; block_table()
  // then returns them.
  absl::Status Allocate(SeqId seq_id, int64_t num_tokens);

  // Grows seq_id to new_total_tokens tokens and returns the blocks added to the end of
  // its table (none while the last block still has room). Fewer tokens than the
  // sequence already has is INVALID_ARGUMENT.
  absl::StatusOr<std::vector<int32_t>> AppendSlots(SeqId seq_id, int64_t new_total_tokens);

  // Whether AppendSlots(seq_id, new_total_tokens) would succeed now.
  bool CanAppendSlots(SeqId seq_id, int64_t new_total_tokens) const;

  // Returns all of seq_id's blocks to the free pool and forgets it.
  absl::Status Free(SeqId seq_id);

  // The blocks of seq_id in position order; valid until the next non-const call.
  absl::StatusOr<absl::Span<const int32_t>> block_table(SeqId seq_id) const;
  // Tokens seq_id's blocks were last sized for.
  absl::StatusOr<int64_t> num_tokens(SeqId seq_id) const;

  bool Contains(SeqId seq_id) const { return seqs_.contains(seq_id); }
  int32_t num_free_blocks() const { return static_cast<int32_t>(free_blocks_.size()); }
  int32_t num_used_blocks() const { return config_.num_blocks - num_free_blocks(); }
  int32_t num_blocks() const { return config_.num_blocks; }
  int32_t block_size() const { return config_.block_size; }
  int64_t num_sequences() const { return static_cast<int64_t>(seqs_.size()); }

 private:
  struct Sequence {
    std::vector<int32_t> blocks;
    int64_t num_tokens = 0;
  };

  explicit BlockManager(const BlockManagerConfig& config);

  // Blocks a call may take now: all free ones, less the watermark when admitting.
  int64_t Available(bool admitting) const;
  // Moves n blocks from the free pool to the end of table; n ≤ num_free_blocks().
  void TakeBlocks(int64_t n, std::vector<int32_t>& table);

  BlockManagerConfig config_;
  // Free block ids; taken from the back. Initially in descending order, so that a
  // fresh manager hands out 0, 1, 2, ...
  std::vector<int32_t> free_blocks_;
  absl::flat_hash_map<SeqId, Sequence> seqs_;
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_BLOCK_MANAGER_H_
