// Causal attention over the paged KV cache, for a batch mixing prefill and decode.
//
// The new tokens' keys and values must already be in the cache (WriteKv). Each query
// token at position p attends to positions [max(0, p − window + 1), p] of its own
// sequence; GQA maps local query head h to local kv head h / (n_q / n_kv). The cache holds
// fp32 or bf16 keys and values (WriteKv rounds to bf16).
#ifndef TPSERVE_WORKER_KERNELS_CPU_PAGED_ATTENTION_H_
#define TPSERVE_WORKER_KERNELS_CPU_PAGED_ATTENTION_H_

#include <cstdint>

#include "absl/types/span.h"
#include "worker/kv_cache.h"
#include "worker/step_batch.h"

namespace tpserve {

struct AttentionParams {
  int64_t num_heads = 0;     // local query heads
  int64_t num_kv_heads = 0;  // local kv heads
  int64_t head_dim = 0;
  int64_t v_head_dim = 0;
  float scale = 1.0f;
  int sliding_window = 0;  // 0: attend to the whole prefix
};

// k: [num_tokens, n_kv, d], v: [num_tokens, n_kv, dv] -> cache slots `slots` of `layer`.
void WriteKv(const float* k, const float* v, absl::Span<const int64_t> slots, int layer,
             KvCache& cache);

// q: [num_tokens, n_q, d] -> out: [num_tokens, n_q, dv]. Over a bf16 cache on a CPU
// with AMX, the tile kernel (attention_amx.h: q and the softmax weights rounded to bf16);
// on other CPUs with AVX2 and FMA, for head sizes that are multiples of 8,
// PagedAttentionAvx2. Either way a row's bits are independent of its batch, of the thread
// count, and of how its prompt was chunked. Otherwise (an fp32 cache, other head sizes)
// PagedAttentionSgemm.
void PagedAttention(const float* q, const StepBatch& batch, const KvCache& cache, int layer,
                    const AttentionParams& params, float* out);

// The same in fp32 on any CPU: each sequence's keys and values widened (exactly) out of
// the cache, then OpenBLAS's sgemm for q·kᵀ and P·V, softmax between.
void PagedAttentionSgemm(const float* q, const StepBatch& batch, const KvCache& cache,
                         int layer, const AttentionParams& params, float* out);

// The same in fp32 over a bf16 cache with AVX2 and FMA (attention_avx2.h): each (sequence,
// kv head) pair on a compute thread, its keys and values widened a block at a time. Needs
// attention_avx2::Available() and attention_avx2::Supports(params).
void PagedAttentionAvx2(const float* q, const StepBatch& batch, const KvCache& cache,
                        int layer, const AttentionParams& params, float* out);

}  // namespace tpserve

#endif  // TPSERVE_WORKER_KERNELS_CPU_PAGED_ATTENTION_H_
