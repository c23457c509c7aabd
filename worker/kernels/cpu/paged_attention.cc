#include "worker/kernels/cpu/paged_attention.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "worker/dtype.h"
#include "worker/kernels/cpu/attention_amx.h"
#include "worker/kernels/cpu/attention_avx2.h"
#include "worker/kernels/cpu/cpu_threads.h"
#include "worker/kernels/cpu/vec_math.h"

namespace tpserve {

void WriteKv(const float* k, const float* v, absl::Span<const int64_t> slots, int layer,
             KvCache& cache) {
  const KvCacheShape& shape = cache.shape();
  const int64_t k_width = int64_t{shape.num_kv_heads} * shape.head_dim;
  const int64_t v_width = int64_t{shape.num_kv_heads} * shape.v_head_dim;
  for (size_t t = 0; t < slots.size(); ++t) {
    if (cache.bf16()) {
      FloatsToBf16(k + t * k_width, k_width, cache.key_bf16(layer, slots[t]));
      FloatsToBf16(v + t * v_width, v_width, cache.value_bf16(layer, slots[t]));
    } else {
      std::memcpy(cache.key(layer, slots[t]), k + t * k_width, k_width * sizeof(float));
      std::memcpy(cache.value(layer, slots[t]), v + t * v_width, v_width * sizeof(float));
    }
  }
}

namespace {

// One row of scores: out-of-window columns (before `first`, after `last`) become 0 and
// the rest softmax(scores): e^(s − max) / Σ.
void SoftmaxRow(float* scores, int64_t columns, int64_t first, int64_t last) {
  float max_score = -INFINITY;
  for (int64_t j = first; j <= last; ++j) max_score = std::max(max_score, scores[j]);
  const float inv = 1.0f / ExpWindow(scores, columns, first, last, max_score);
  for (int64_t j = first; j <= last; ++j) scores[j] *= inv;
}

// Query rows handled by one pair of GEMMs: bounds the scores buffer at kRowsPerChunk ×
// context floats.
constexpr int64_t kRowsPerChunk = 256;

// PagedAttentionSgemm for kv head `kv_head` of `seq`, whose first new token is row t0
// of the step: its keys and values widened, then per chunk of rows the scores by one
// sgemm, the masked softmax, and the output by another. Scratch is per thread.
void AttendHeadSgemm(const float* q, const SequenceStep& seq, int64_t t0, int64_t kv_head,
                     const KvCache& cache, int layer, const AttentionParams& p, float* out) {
  const int64_t group = p.num_heads / p.num_kv_heads;  // query heads per kv head
  const int64_t d = p.head_dim, dv = p.v_head_dim;
  const int block_size = cache.shape().block_size;
  const int64_t tokens_per_chunk = std::max<int64_t>(1, kRowsPerChunk / group);
  thread_local std::vector<float> keys, values, scores, q_rows, out_rows;
  const int32_t first_pos = seq.context_len - seq.num_new_tokens;
  // Positions any of its new tokens reads: [lo_all, context_len).
  const int32_t lo_all = p.sliding_window > 0 ? std::max(0, first_pos - p.sliding_window + 1) : 0;
  const int64_t span = seq.context_len - lo_all;
  keys.resize(span * d);     // [span, d] of one kv head
  values.resize(span * dv);  // [span, dv]
  for (int64_t j = 0; j < span; ++j) {
    const int32_t pos = lo_all + static_cast<int32_t>(j);
    const int64_t slot = seq.SlotOf(pos, block_size);
    if (cache.bf16()) {  // widened exactly
      const uint16_t* key = cache.key_bf16(layer, slot) + kv_head * d;
      const uint16_t* value = cache.value_bf16(layer, slot) + kv_head * dv;
      Bf16ToFloats(key, d, &keys[j * d]);
      Bf16ToFloats(value, dv, &values[j * dv]);
    } else {
      std::memcpy(&keys[j * d], cache.key(layer, slot) + kv_head * d, d * sizeof(float));
      std::memcpy(&values[j * dv], cache.value(layer, slot) + kv_head * dv, dv * sizeof(float));
    }
  }
  for (int32_t i0 = 0; i0 < seq.num_new_tokens; i0 += tokens_per_chunk) {
    const int32_t i1 =
        static_cast<int32_t>(std::min<int64_t>(seq.num_new_tokens, i0 + tokens_per_chunk));
    const int64_t rows = int64_t{i1 - i0} * group;
    // Columns up to the chunk's last token; earlier rows mask the rest.
    const int64_t columns = first_pos + i1 - lo_all;
    q_rows.resize(rows * d);
    for (int32_t i = i0; i < i1; ++i) {  // row (i, g): token i, query head kv_head·G + g
      std::memcpy(&q_rows[(i - i0) * group * d], q + ((t0 + i) * p.num_heads + kv_head * group) * d,
                  group * d * sizeof(float));
    }
    scores.resize(rows * columns);  // [rows, columns]
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(rows),
                static_cast<blasint>(columns), static_cast<blasint>(d), p.scale, q_rows.data(),
                static_cast<blasint>(d), keys.data(), static_cast<blasint>(d), 0.0f,
                scores.data(), static_cast<blasint>(columns));
    for (int32_t i = i0; i < i1; ++i) {
      const int32_t pos = first_pos + i;
      const int32_t lo = p.sliding_window > 0 ? std::max(0, pos - p.sliding_window + 1) : 0;
      for (int64_t g = 0; g < group; ++g) {
        SoftmaxRow(&scores[((i - i0) * group + g) * columns], columns, lo - lo_all, pos - lo_all);
      }
    }
    out_rows.resize(rows * dv);  // [rows, dv]
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<blasint>(rows),
                static_cast<blasint>(dv), static_cast<blasint>(columns), 1.0f, scores.data(),
                static_cast<blasint>(columns), values.data(), static_cast<blasint>(dv), 0.0f,
                out_rows.data(), static_cast<blasint>(dv));
    for (int32_t i = i0; i < i1; ++i) {
      std::memcpy(out + ((t0 + i) * p.num_heads + kv_head * group) * dv,
                  &out_rows[(i - i0) * group * dv], group * dv * sizeof(float));
    }
  }
}

// fn(sequence index, the row of its first new token in the step, kv head) for every
// (sequence, kv head) pair of the batch, shared out between the compute threads.
template <typename Fn>
void ForEachSequenceHead(const StepBatch& batch, int64_t num_kv_heads, const Fn& fn) {
  std::vector<int64_t> t0(batch.seqs.size());  // flattened index of each one's first token
  for (size_t s = 1; s < batch.seqs.size(); ++s) {
    t0[s] = t0[s - 1] + batch.seqs[s - 1].num_new_tokens;
  }
  ParallelEach(static_cast<int64_t>(batch.seqs.size()) * num_kv_heads, [&](int64_t pair) {
    const int64_t s = pair / num_kv_heads;
    fn(s, t0[s], pair % num_kv_heads);
  });
}

}  // namespace

void PagedAttention(const float* q, const StepBatch& batch, const KvCache& cache, int layer,
                    const AttentionParams& p, float* out) {
  if (cache.bf16() && !attention_amx::Available() && attention_avx2::Available() &&
      attention_avx2::Supports(p)) {
    PagedAttentionAvx2(q, batch, cache, layer, p, out);
    return;
  }
  if (!cache.bf16() || !attention_amx::Available()) {
    PagedAttentionSgemm(q, batch, cache, layer, p, out);
    return;
  }
  // Items shared out between the compute threads one at a time (a prompt's cost far more
  // than a decode's), each a sequence's kv heads [kv_begin, kv_end), computed as they would
  // be alone. A prompt's heads are items of their own. A decode's (one tile of query rows
  // a head) are one item when there are enough sequences to keep the threads busy: its
  // rows are then read in one pass over the cache, each position's heads adjacent.
  struct Item {
    int64_t seq, kv_begin, kv_end;
  };
  const int64_t group = p.num_heads / p.num_kv_heads;
  const bool whole_decodes =
      static_cast<int64_t>(batch.seqs.size()) >= 2 * int64_t{CpuThreads()};
  std::vector<Item> items;
  std::vector<int64_t> t0(batch.seqs.size());  // flattened index of each one's first token
  for (size_t s = 0; s < batch.seqs.size(); ++s) {
    if (s > 0) t0[s] = t0[s - 1] + batch.seqs[s - 1].num_new_tokens;
    const int64_t rows = int64_t{batch.seqs[s].num_new_tokens} * group;
    const bool decode = rows <= attention_amx::kQueryRowsPerTile;
    if (whole_decodes && decode) {
      items.push_back({static_cast<int64_t>(s), 0, p.num_kv_heads});
      continue;
    }
    for (int64_t h = 0; h < p.num_kv_heads; ++h) {
      items.push_back({static_cast<int64_t>(s), h, h + 1});
    }
  }
  ParallelEach(static_cast<int64_t>(items.size()), [&](int64_t i) {
    const Item& item = items[i];
    attention_amx::AttendSequence(q, batch.seqs[item.seq], t0[item.seq], item.kv_begin,
                                  item.kv_end, cache, layer, p, out);
  });
}

void PagedAttentionSgemm(const float* q, const StepBatch& batch, const KvCache& cache, int layer,
                         const AttentionParams& p, float* out) {
  // Each (sequence, kv head) pair's GEMMs on its own compute thread, OpenBLAS
  // single-threaded meanwhile (the pairs are the parallelism). Single-threaded also when
  // the compute threads are one: OpenBLAS's threads split an sgemm's sums differently, so
  // a row's bits would depend on OpenBLAS's own thread count (OPENBLAS_NUM_THREADS or the
  // last SetGemmThreads), not on the rank's configuration alone.
  const int blas_threads = openblas_get_num_threads();
  if (blas_threads != 1) openblas_set_num_threads(1);
  ForEachSequenceHead(batch, p.num_kv_heads, [&](int64_t s, int64_t t0, int64_t kv_head) {
    AttendHeadSgemm(q, batch.seqs[s], t0, kv_head, cache, layer, p, out);
  });
  if (blas_threads != 1) openblas_set_num_threads(blas_threads);
}

void PagedAttentionAvx2(const float* q, const StepBatch& batch, const KvCache& cache, int layer,
                        const AttentionParams& p, float* out) {
  ForEachSequenceHead(batch, p.num_kv_heads, [&](int64_t s, int64_t t0, int64_t kv_head) {
    attention_avx2::AttendHead(q, batch.seqs[s], t0, kv_head, cache, layer, p, out);
  });
}

}  // namespace tpserve
