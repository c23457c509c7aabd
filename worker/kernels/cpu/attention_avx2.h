// Causal attention of one (sequence, kv head) pair over a bf16 paged KV cache with AVX2
// and FMA, for CPUs without AMX: the contract of PagedAttention (paged_attention.h) for
// that pair, in fp32 throughout.
//
// The new tokens' query rows — (token, query head of the group) pairs — are taken in
// chunks of up to kRowsPerChunk. Per chunk, two passes over the positions any row sees,
// in blocks of a few KiB: each block's keys are widened out of the cache into L1 (software
// prefetches of the next block's rows measured slower) and every row's scores against
// them computed (eight positions at a time, each score a dot product of eight lane partial
// sums over d, the lanes summed in one fixed tree, then scaled), the row's maximum kept;
// each row's weights e^(s − max) over its window (ExpWindow, vec_math.h) and their sum;
// then each block's values widened and folded into the rows' outputs, four rows by
// twenty-four columns at a time; finally each output divided by its row's sum.
// A chunk of one token (every decode) reads its keys and values where they lie instead,
// widening them in registers: each key row, asked for some positions ahead, is scored
// against up to eight query rows in one pass (the same lane sums and tree, so the same
// bits), and those passes ask for the value rows as well, as many as fit in L2, so that
// the fold that follows finds them there (1.7x the kernel at 1,024 positions and a batch
// of 32 against the widening path, docs/perf.md).
//
// A query row's result depends only on its own q, its position and window, and the cache:
// every score is one dot product whatever positions share its pass; the softmax sees only
// the row's window; and a row's output column is one chain of fused multiply-adds over
// the positions in order, where positions outside its window (weight +0) leave the sum
// bit for bit as it was. So a prompt prefilled whole, in chunks, or a token at a time,
// alone or beside other sequences, on any thread count, gets the same bits. (Those
// positions are the sequence's own, so the one exception is a prompt whose own values are
// not finite: 0 × inf would reach the earlier rows of a tile.)
// Only positions of the row's own sequence inside [first position any row of the chunk
// sees, context_len) are read.
#ifndef TPSERVE_WORKER_KERNELS_CPU_ATTENTION_AVX2_H_
#define TPSERVE_WORKER_KERNELS_CPU_ATTENTION_AVX2_H_

#include <cstdint>

#include "worker/kernels/cpu/paged_attention.h"
#include "worker/kv_cache.h"
#include "worker/step_batch.h"

namespace tpserve {
namespace attention_avx2 {

inline constexpr int64_t kRowsPerChunk = 256;

// True when this CPU has AVX2 and FMA.
bool Available();

// True for the shapes the kernel takes: head_dim and v_head_dim multiples of 8.
bool Supports(const AttentionParams& params);

// Kv head `kv_head` of the new tokens of `seq`, whose first query row is token `t0` of
// the step: q: [.., n_q, d] -> out: [.., n_q, dv] at the same rows, for that kv head's
// query heads (calls on different pairs may run concurrently). The cache must be bf16 and
// hold every position of the sequence up to context_len. Needs Available() and
// Supports(params).
void AttendHead(const float* q, const SequenceStep& seq, int64_t t0, int64_t kv_head,
                const KvCache& cache, int layer, const AttentionParams& params, float* out);

}  // namespace attention_avx2
}  // namespace tpserve

#endif  // TPSERVE_WORKER_KERNELS_CPU_ATTENTION_AVX2_H_
