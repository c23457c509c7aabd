// Causal attention over the paged KV cache, for a batch mixing prefill and decode.
//
// The new tokens' keys and values must already be in the cache (WriteKv). Each query
// token at position p attends to positions [max(0, p − window + 1), p] of its own
// sequence; GQA maps local query head h to local kv head h / (n_q / n_kv). fp32 math
// over an fp32 or a bf16 cache (WriteKv rounds to bf16; reads widen exactly).
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

// q: [num_tokens, n_q, d] -> out: [num_tokens, n_q, dv].
void PagedAttention(const float* q, const StepBatch& batch, const KvCache& cache, int layer,
                    const AttentionParams& params, float* out);

}  // namespace tpserve

#endif  // TPSERVE_WORKER_KERNELS_CPU_PAGED_ATTENTION_H_
