#include "worker/kernels/cpu/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace tpserve {

void WriteKv(const float* k, const float* v, absl::Span<const int64_t> slots, int layer,
             KvCache& cache) {
  const KvCacheShape& shape = cache.shape();
  const int64_t k_width = int64_t{shape.num_kv_heads} * shape.head_dim;
  const int64_t v_width = int64_t{shape.num_kv_heads} * shape.v_head_dim;
  for (size_t t = 0; t < slots.size(); ++t) {
    std::memcpy(cache.key(layer, slots[t]), k + t * k_width, k_width * sizeof(float));
    std::memcpy(cache.value(layer, slots[t]), v + t * v_width, v_width * sizeof(float));
  }
}

namespace {

// One query head of one token against positions [lo, hi] of its sequence.
void AttendOne(const float* q, const SequenceStep& seq, int32_t lo, int32_t hi,
               int64_t kv_head, const KvCache& cache, int layer, const AttentionParams& p,
               std::vector<float>& scores, float* out) {
  const int block_size = cache.shape().block_size;
  scores.resize(hi - lo + 1);
  float max_score = -INFINITY;
  for (int32_t j = lo; j <= hi; ++j) {
    const int64_t slot = int64_t{seq.block_table[j / block_size]} * block_size + j % block_size;
    const float* key = cache.key(layer, slot) + kv_head * p.head_dim;
    float dot = 0.0f;
    for (int64_t d = 0; d < p.head_dim; ++d) dot += q[d] * key[d];
    scores[j - lo] = dot * p.scale;
    max_score = std::max(max_score, scores[j - lo]);
  }
  float denom = 0.0f;
  for (float& s : scores) {
    s = std::exp(s - max_score);
    denom += s;
  }
  std::fill(out, out + p.v_head_dim, 0.0f);
  for (int32_t j = lo; j <= hi; ++j) {
    const int64_t slot = int64_t{seq.block_table[j / block_size]} * block_size + j % block_size;
    const float* value = cache.value(layer, slot) + kv_head * p.v_head_dim;
    const float w = scores[j - lo] / denom;
    for (int64_t d = 0; d < p.v_head_dim; ++d) out[d] += w * value[d];
  }
}

}  // namespace

void PagedAttention(const float* q, const StepBatch& batch, const KvCache& cache, int layer,
                    const AttentionParams& p, float* out) {
  const int64_t group = p.num_heads / p.num_kv_heads;  // query heads per kv head
  std::vector<float> scores;
  int64_t t = 0;  // flattened token index
  for (const SequenceStep& seq : batch.seqs) {
    for (int32_t i = 0; i < seq.num_new_tokens; ++i, ++t) {
      const int32_t pos = seq.context_len - seq.num_new_tokens + i;
      const int32_t lo = p.sliding_window > 0 ? std::max(0, pos - p.sliding_window + 1) : 0;
      for (int64_t h = 0; h < p.num_heads; ++h) {
        AttendOne(q + (t * p.num_heads + h) * p.head_dim, seq, lo, pos, h / group, cache, layer,
                  p, scores, out + (t * p.num_heads + h) * p.v_head_dim);
      }
    }
  }
}

}  // namespace tpserve
