// Causal attention of one sequence over a bf16 paged KV cache with AMX tiles (Intel
// Sapphire Rapids and later): the same contract as PagedAttention (paged_attention.h) for
// one sequence of a step, flash-attention style.
//
// A prompt's keys and values of the call's kv heads are copied once per call out of the
// cache's blocks into the tile layouts (bf16, no widening), in one pass over its cache rows
// (a position's heads are adjacent in its row). A decode (one or two tiles of query rows a
// kv head) reads its keys where they lie in the cache, as the A operand of sᵀ = k·qᵀ, and
// runs its tiles over the blocks together, a block's values gathered at a time while the
// rows of the block after are fetched. Query rows — (token, query head of the
// group) pairs, 16 to a tile — run over the positions in blocks of kPositionsPerBlock
// aligned to absolute positions: scores S = q·kᵀ in tiles, then an online softmax in
// fp32 (the running max and sum of each row; a block's weights rounded to bf16, the sum
// taken over the rounded weights), then O_block = P·V in tiles, folded into the row's fp32
// output as O = O·e^(m_old − m_new) + O_block; finally O / sum.
//
// A query row's result depends only on its own q, its position and window, and the cache:
// tile rows do not mix, the blocks are the same whatever the call, and blocks a row does
// not see leave it bit for bit as it was. So a prompt prefilled whole, in chunks, or token
// by token, alone or beside other sequences, gets the same bits at every position.
//
// Numerics: q and the softmax weights are rounded to bf16 (nearest even), as the cache's
// keys and values already are; products accumulate in fp32 (TDPBF16PS); scores are scaled
// in fp32. That is the bf16 model path's precision (transformers in bf16 rounds all four).
#ifndef TPSERVE_WORKER_KERNELS_CPU_ATTENTION_AMX_H_
#define TPSERVE_WORKER_KERNELS_CPU_ATTENTION_AMX_H_

#include <cstdint>

#include "worker/kernels/cpu/paged_attention.h"
#include "worker/kv_cache.h"
#include "worker/step_batch.h"

namespace tpserve {
namespace attention_amx {

inline constexpr int64_t kPositionsPerBlock = 64;
inline constexpr int64_t kQueryRowsPerTile = 16;

// True when the tile kernels can run here (bf16_amx::Available()).
bool Available();

// Whether a decode's keys are read straight from the cache (the default) or gathered into
// the tile layout as a prompt's are; the results are the same bits either way. For tests
// and benchmarks; a call reads the setting once.
void SetKeysFromCache(bool on);

// The new tokens of `seq`, whose first query row is token `t0` of the step: q: [.., n_q, d]
// -> out: [.., n_q, dv] at the same rows, for the query heads of kv heads [kv_begin,
// kv_end) (each pair of calls on disjoint ranges may run concurrently). The cache must be
// bf16 and hold every position of the sequence up to context_len. Needs Available().
void AttendSequence(const float* q, const SequenceStep& seq, int64_t t0, int64_t kv_begin,
                    int64_t kv_end, const KvCache& cache,
                    int layer, const AttentionParams& params, float* out);

}  // namespace attention_amx
}  // namespace tpserve

#endif  // TPSERVE_WORKER_KERNELS_CPU_ATTENTION_AMX_H_
