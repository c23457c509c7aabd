// Device code of paged attention (see paged_attention.h): the tiled attention kernel and
// the split-K merge. Included only by paged_attention.cu, which picks the tile shapes.
//
// One CTA owns one sequence, one kv head, one split of the context and a tile of kRows
// query rows, a row being a (new token, query head of the kv head's group) pair in
// token-major order, so the group's heads share every key and value the CTA loads. It
// walks the visible keys kKeys at a time: keys and values are staged through the block
// table into shared memory (16-byte cp.async when the rows allow), scores go through
// shared memory, and each warp keeps an fp32 online softmax and the output of its rows in
// registers. Scores are kept in the exp2 domain (q is pre-scaled by scale·log2 e).
#ifndef TPSERVE_WORKER_KERNELS_CUDA_PAGED_ATTENTION_TILE_CUH_
#define TPSERVE_WORKER_KERNELS_CUDA_PAGED_ATTENTION_TILE_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "worker/kernels/cuda/paged_attention_primitives.cuh"

namespace tpserve {
namespace attention {

// Shared memory of one CTA for head dims d, dv ≤ kMaxD. Q and scores are fp32, K and V
// stay in T. Strides are in elements.
template <typename T, int kMaxD, int kRows, int kKeys>
struct Tile {
  static constexpr int kRowsPerTile = kRows, kKeysPerTile = kKeys;
  static constexpr int kVec = 16 / sizeof(T);                    // elements per 16-byte chunk
  static constexpr int kCols = kMaxD / 32;                       // output columns per lane
  static constexpr int kPvRows = kRows / kWarps;                 // rows per warp (softmax, P·V)
  static constexpr int kScoreRows = kRows / (kThreads / kKeys);  // rows per thread (Q·Kᵀ)
  // Resident CTAs per SM the registers must allow: decode tiles are small and latency-bound.
  static constexpr int kMinCtasPerSm = kRows <= 8 ? 4 : 2;
  static_assert(kMaxD % 32 == 0 && kMaxD <= 256, "kMaxD: 32, 64, 128 or 256");
  static_assert(kKeys % 32 == 0 && kThreads % kKeys == 0, "a warp scores 32 keys of one row group");
  static_assert(kRows % kWarps == 0 && kRows % (kThreads / kKeys) == 0 && kRows <= kThreads,
                "rows split evenly over warps and score groups");

  __host__ __device__ static int QStride(int d) { return RoundUp(d, kVec); }
  // An odd number of chunks: the 8 lanes of a 16-byte phase read 8 rows in 8 bank groups.
  __host__ __device__ static int KStride(int d) { return (RoundUp(d, kVec) / kVec | 1) * kVec; }
  __host__ __device__ static int VStride(int dv) {
    return RoundUp(dv, kVec > kCols ? kVec : kCols);
  }
  __host__ __device__ static size_t SmemBytes(int d, int dv) {
    return sizeof(float) * (kRows * QStride(d) + kRows * kKeys) + sizeof(int64_t) * kKeys +
           sizeof(T) * kKeys * (KStride(d) + VStride(dv)) + sizeof(int) * 2 * kRows;
  }
};

template <typename T>
struct AttentionArgs {
  const T* q;  // token t, head h at q[t·q_row_stride + h·head_dim]
  int64_t q_row_stride;
  const T* k_cache;             // [num_slots, num_kv_heads, head_dim]
  const T* v_cache;             // [num_slots, num_kv_heads, v_head_dim]
  const int32_t* query_start;   // [num_seqs + 1]
  const int32_t* context_lens;  // [num_seqs]
  const int32_t* block_tables;  // [num_seqs, max_blocks_per_seq]
  int max_blocks_per_seq, block_size;
  int max_positions;  // max_blocks_per_seq·block_size: no read past a block table row
  int num_tokens, num_heads, num_kv_heads, group, head_dim, v_head_dim;
  float scale_log2;  // scale·log2(e)
  int sliding_window;
  int num_splits, split_keys;  // split z covers positions [z·split_keys, (z+1)·split_keys)
  bool k_vector, v_vector;     // cache rows are whole, aligned 16-byte chunks
  T* out;                      // [num_tokens, num_heads, v_head_dim] when num_splits == 1
  float* partial_out;          // [num_splits, num_tokens, num_heads, v_head_dim] otherwise
  float* partial_max;          // [num_splits, num_tokens, num_heads]
  float* partial_sum;          // [num_splits, num_tokens, num_heads]
};

__device__ __forceinline__ int VisibleFrom(int pos, int sliding_window) {
  return sliding_window > 0 ? max(0, pos - sliding_window + 1) : 0;
}

// Where one CTA works: a tile of (token, head-in-group) rows of one sequence and kv head.
struct RowTile {
  int seq, kv_head, split;
  int q_begin;    // q row of the sequence's first new token
  int row0;       // first row of the tile, over the sequence's num_new·group rows
  int num_rows;   // rows of the tile that exist (≤ 0: none)
  int first_pos;  // position of the sequence's first new token
};

template <typename T>
__device__ __forceinline__ RowTile LocateTile(const AttentionArgs<T>& a, int rows_per_tile) {
  RowTile t;
  t.seq = blockIdx.y;
  t.kv_head = blockIdx.z % a.num_kv_heads;
  t.split = blockIdx.z / a.num_kv_heads;
  t.q_begin = a.query_start[t.seq];
  const int num_new = a.query_start[t.seq + 1] - t.q_begin;
  t.row0 = blockIdx.x * rows_per_tile;
  t.num_rows = min(rows_per_tile, num_new * a.group - t.row0);
  t.first_pos = a.context_lens[t.seq] - num_new;
  return t;
}

// The CTA's shared memory, carved for head dims d, dv (strides in elements).
template <typename T>
struct SmemTile {
  float* q;       // [kRows, q_stride], q·scale·log2(e), zero past the rows and past d
  float* p;       // [kRows, kKeys], scores, then probabilities
  int64_t* slot;  // [kKeys], cache slot of each staged key (< 0: none)
  T* k;           // [kKeys, k_stride]
  T* v;           // [kKeys, v_stride]
  int* lo;        // [kRows], first visible position of each row
  int* hi;        // [kRows], last visible position (−1: a missing row)
  int q_stride, k_stride, v_stride;
};

template <typename L, typename T>
__device__ __forceinline__ SmemTile<T> CarveSmem(unsigned char* smem, int d, int dv) {
  SmemTile<T> m;
  m.q_stride = L::QStride(d), m.k_stride = L::KStride(d), m.v_stride = L::VStride(dv);
  m.q = reinterpret_cast<float*>(smem);
  m.p = m.q + L::kRowsPerTile * m.q_stride;
  m.slot = reinterpret_cast<int64_t*>(m.p + L::kRowsPerTile * L::kKeysPerTile);
  m.k = reinterpret_cast<T*>(m.slot + L::kKeysPerTile);
  m.v = m.k + L::kKeysPerTile * m.k_stride;
  m.lo = reinterpret_cast<int*>(m.v + L::kKeysPerTile * m.v_stride);
  m.hi = m.lo + L::kRowsPerTile;
  return m;
}

// The tile's queries and their visible key ranges into shared memory.
template <typename L, typename T>
__device__ __forceinline__ void StageQueries(const AttentionArgs<T>& a, const RowTile& t,
                                             const SmemTile<T>& m) {
  constexpr int kRows = L::kRowsPerTile;
  for (int i = threadIdx.x; i < kRows * m.q_stride; i += kThreads) {
    const int r = i / m.q_stride, c = i - r * m.q_stride;
    float v = 0.0f;
    if (r < t.num_rows && c < a.head_dim) {
      const int64_t token = t.q_begin + (t.row0 + r) / a.group;
      const int head = t.kv_head * a.group + (t.row0 + r) % a.group;
      v = ToFloat(a.q[token * a.q_row_stride + int64_t{head} * a.head_dim + c]) * a.scale_log2;
    }
    m.q[i] = v;
  }
  if (threadIdx.x < kRows) {
    const int r = threadIdx.x, pos = t.first_pos + (t.row0 + r) / a.group;
    m.lo[r] = r < t.num_rows ? VisibleFrom(pos, a.sliding_window) : 0;
    m.hi[r] = r < t.num_rows ? pos : -1;
  }
}

// m.p = masked scores of the staged keys [k0, k0 + n_keys): thread → key threadIdx % kKeys,
// rows [score_row0, +kScoreRows), so that a warp shares its rows (broadcast q reads).
template <typename L, typename T>
__device__ __forceinline__ void ScoreTile(const SmemTile<T>& m, int num_rows, int k0, int n_keys,
                                          int k_chunks) {
  constexpr int kVec = L::kVec, kKeys = L::kKeysPerTile, kScoreRows = L::kScoreRows;
  const int key = threadIdx.x % kKeys, score_row0 = threadIdx.x / kKeys * kScoreRows;
  float s[kScoreRows];
#pragma unroll
  for (int r = 0; r < kScoreRows; ++r) s[r] = 0.0f;
  if (score_row0 < num_rows && key < n_keys) {
    const T* k_row = m.k + key * m.k_stride;
#pragma unroll 2
    for (int c = 0; c < k_chunks; ++c) {
      float kf[kVec];
      LoadFloats<T, kVec>(k_row + c * kVec, kf);
#pragma unroll
      for (int r = 0; r < kScoreRows; ++r) {
        const float* q_row = m.q + (score_row0 + r) * m.q_stride + c * kVec;
#pragma unroll
        for (int e = 0; e < kVec; e += 4) {
          const float4 qv = LoadVec<float4>(q_row + e);
          s[r] = fmaf(qv.x, kf[e], s[r]);
          s[r] = fmaf(qv.y, kf[e + 1], s[r]);
          s[r] = fmaf(qv.z, kf[e + 2], s[r]);
          s[r] = fmaf(qv.w, kf[e + 3], s[r]);
        }
      }
    }
  }
  const int p = k0 + key;
#pragma unroll
  for (int r = 0; r < kScoreRows; ++r) {
    const int row = score_row0 + r;
    const bool visible = key < n_keys && p >= m.lo[row] && p <= m.hi[row];
    m.p[row * kKeys + key] = visible ? s[r] : -INFINITY;
  }
}

// Online softmax of one warp's kPvRows rows of scores p_rows [kPvRows, kKeys]: turns them
// into probabilities against the running max, rescales the running sums and outputs.
template <typename L>
__device__ __forceinline__ void SoftmaxRows(float* p_rows, float (&row_max)[L::kPvRows],
                                            float (&row_sum)[L::kPvRows],
                                            float (&acc)[L::kPvRows][L::kCols]) {
  constexpr int kKeys = L::kKeysPerTile;
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < L::kPvRows; ++i) {
    float* p_row = p_rows + i * kKeys;
    float v[kKeys / 32], tile_max = -INFINITY;
#pragma unroll
    for (int u = 0; u < kKeys / 32; ++u) {
      v[u] = p_row[lane + 32 * u];
      tile_max = fmaxf(tile_max, v[u]);
    }
    const float new_max = fmaxf(row_max[i], WarpMax(tile_max));
    const float base = new_max == -INFINITY ? 0.0f : new_max;  // no key seen yet
    float sum = 0.0f;
#pragma unroll
    for (int u = 0; u < kKeys / 32; ++u) {
      const float e = exp2f(v[u] - base);
      p_row[lane + 32 * u] = e;
      sum += e;
    }
    const float rescale = exp2f(row_max[i] - base);
    row_sum[i] = row_sum[i] * rescale + WarpSum(sum);
    row_max[i] = new_max;
#pragma unroll
    for (int c = 0; c < L::kCols; ++c) acc[i][c] *= rescale;
  }
}

// acc += P·V over the staged keys, for the warp's rows and this lane's columns [c0, +kCols).
template <typename L, typename T>
__device__ __forceinline__ void AccumulateValues(const SmemTile<T>& m, const float* p_rows, int c0,
                                                 int n_keys, float (&acc)[L::kPvRows][L::kCols]) {
#pragma unroll 2
  for (int j = 0; j < n_keys; ++j) {
    float vf[L::kCols];
    LoadFloats<T, L::kCols>(m.v + j * m.v_stride + c0, vf);
#pragma unroll
    for (int i = 0; i < L::kPvRows; ++i) {
      const float p = p_rows[i * L::kKeysPerTile + j];
#pragma unroll
      for (int c = 0; c < L::kCols; ++c) acc[i][c] = fmaf(p, vf[c], acc[i][c]);
    }
  }
}

// The warp's rows: normalised into `out`, or unnormalised with their max and sum into the
// split's partials.
template <typename L, typename T>
__device__ __forceinline__ void StoreRows(const AttentionArgs<T>& a, const RowTile& t, int pv_row0,
                                          int c0, const float (&row_max)[L::kPvRows],
                                          const float (&row_sum)[L::kPvRows],
                                          const float (&acc)[L::kPvRows][L::kCols]) {
  const int dv = a.v_head_dim;
#pragma unroll
  for (int i = 0; i < L::kPvRows; ++i) {
    const int row = t.row0 + pv_row0 + i;
    const int64_t token = t.q_begin + row / a.group;
    if (pv_row0 + i >= t.num_rows || token >= a.num_tokens) break;
    const int64_t out_row = token * a.num_heads + t.kv_head * a.group + row % a.group;
    if (a.num_splits == 1) {
      const float inv_sum = 1.0f / row_sum[i];
      T* o = a.out + out_row * dv + c0;
#pragma unroll
      for (int c = 0; c < L::kCols; ++c) {
        if (c0 + c < dv) o[c] = FromFloat<T>(acc[i][c] * inv_sum);
      }
    } else {
      const int64_t part = int64_t{t.split} * a.num_tokens * a.num_heads + out_row;
      float* o = a.partial_out + part * dv + c0;
#pragma unroll
      for (int c = 0; c < L::kCols; ++c) {
        if (c0 + c < dv) o[c] = acc[i][c];
      }
      if (c0 == 0) a.partial_max[part] = row_max[i], a.partial_sum[part] = row_sum[i];
    }
  }
}

// grid: (row tiles, num_seqs, num_kv_heads·num_splits); kThreads threads; L::SmemBytes.
template <typename T, int kMaxD, int kRows, int kKeys>
__global__ void __launch_bounds__(kThreads, (Tile<T, kMaxD, kRows, kKeys>::kMinCtasPerSm))
    PagedAttentionKernel(const AttentionArgs<T> a) {
  using L = Tile<T, kMaxD, kRows, kKeys>;
  TPSERVE_DYNAMIC_SMEM(smem);
  const RowTile t = LocateTile(a, kRows);
  if (t.num_rows <= 0) return;  // the whole CTA: past this sequence's rows
  const SmemTile<T> m = CarveSmem<L, T>(smem, a.head_dim, a.v_head_dim);
  StageQueries<L>(a, t, m);

  // Keys any row of the tile sees, within this CTA's split.
  const int split_begin = t.split * a.split_keys;
  const int key_begin =
      max(VisibleFrom(t.first_pos + t.row0 / a.group, a.sliding_window), split_begin);
  int key_end = min(t.first_pos + (t.row0 + t.num_rows - 1) / a.group + 1, a.max_positions);
  if (t.split + 1 < a.num_splits) key_end = min(key_end, split_begin + a.split_keys);

  const int pv_row0 = threadIdx.x / 32 * L::kPvRows, c0 = threadIdx.x % 32 * L::kCols;
  const bool warp_has_rows = pv_row0 < t.num_rows;
  const int32_t* table = a.block_tables + int64_t{t.seq} * a.max_blocks_per_seq;
  const int k_chunks = RoundUp(a.head_dim, L::kVec) / L::kVec, v_chunks = m.v_stride / L::kVec;
  float row_max[L::kPvRows], row_sum[L::kPvRows], acc[L::kPvRows][L::kCols];
#pragma unroll
  for (int i = 0; i < L::kPvRows; ++i) {
    row_max[i] = -INFINITY, row_sum[i] = 0.0f;
#pragma unroll
    for (int c = 0; c < L::kCols; ++c) acc[i][c] = 0.0f;
  }

  // Thread j < kKeys looks up key k0 + j's slot one tile ahead, off the critical path.
  auto slot_of = [&](int p) -> int64_t {
    return threadIdx.x < kKeys && p < key_end
               ? int64_t{table[p / a.block_size]} * a.block_size + p % a.block_size
               : -1;
  };
  int64_t next_slot = slot_of(key_begin + threadIdx.x);
  for (int k0 = key_begin; k0 < key_end; k0 += kKeys) {
    const int n_keys = min(kKeys, key_end - k0);
    if (threadIdx.x < kKeys) m.slot[threadIdx.x] = next_slot;
    __syncthreads();  // slots written; the last tile's reads of m.k, m.v, m.p are done
    StageRows<T, kKeys>(a.k_cache, int64_t{a.num_kv_heads} * a.head_dim,
                        int64_t{t.kv_head} * a.head_dim, a.head_dim, k_chunks, m.k_stride, m.slot,
                        a.k_vector, m.k);
    CommitCopies();
    StageRows<T, kKeys>(a.v_cache, int64_t{a.num_kv_heads} * a.v_head_dim,
                        int64_t{t.kv_head} * a.v_head_dim, a.v_head_dim, v_chunks, m.v_stride,
                        m.slot, a.v_vector, m.v);
    CommitCopies();
    next_slot = slot_of(k0 + kKeys + threadIdx.x);
    WaitCopies<1>();  // this thread's keys have landed; its values may still be in flight
    __syncthreads();
    ScoreTile<L>(m, t.num_rows, k0, n_keys, k_chunks);
    __syncthreads();
    if (warp_has_rows) SoftmaxRows<L>(m.p + pv_row0 * kKeys, row_max, row_sum, acc);
    WaitCopies<0>();
    __syncthreads();  // values landed; probabilities written
    if (warp_has_rows && c0 < a.v_head_dim) {
      AccumulateValues<L>(m, m.p + pv_row0 * kKeys, c0, n_keys, acc);
    }
  }
  if (warp_has_rows && c0 < a.v_head_dim) StoreRows<L>(a, t, pv_row0, c0, row_max, row_sum, acc);
}

template <typename T>
struct MergeArgs {
  const int32_t* query_start;  // [num_seqs + 1]
  int num_seqs, num_tokens, num_heads, v_head_dim, num_splits;
  const float* partial_out;  // [num_splits, num_tokens, num_heads, v_head_dim]
  const float* partial_max;  // [num_splits, num_tokens, num_heads]
  const float* partial_sum;  // [num_splits, num_tokens, num_heads]
  T* out;                    // [num_tokens, num_heads, v_head_dim]
};

// grid: num_tokens·num_heads (one output row each); kThreads threads.
template <typename T>
__global__ void __launch_bounds__(kThreads) MergeSplitsKernel(const MergeArgs<T> a) {
  const int64_t out_row = blockIdx.x, token = out_row / a.num_heads;
  if (token < a.query_start[0] || token >= a.query_start[a.num_seqs]) return;  // padding
  const int64_t rows = int64_t{a.num_tokens} * a.num_heads;
  float max_all = -INFINITY;
  for (int s = 0; s < a.num_splits; ++s)
    max_all = fmaxf(max_all, a.partial_max[s * rows + out_row]);
  float sum_all = 0.0f;
  for (int s = 0; s < a.num_splits; ++s) {
    sum_all +=
        a.partial_sum[s * rows + out_row] * exp2f(a.partial_max[s * rows + out_row] - max_all);
  }
  const float inv_sum = 1.0f / sum_all;
  for (int c = threadIdx.x; c < a.v_head_dim; c += blockDim.x) {
    float o = 0.0f;
    for (int s = 0; s < a.num_splits; ++s) {
      const float w = exp2f(a.partial_max[s * rows + out_row] - max_all);
      o += w * a.partial_out[(s * rows + out_row) * a.v_head_dim + c];
    }
    a.out[out_row * a.v_head_dim + c] = FromFloat<T>(o * inv_sum);
  }
}

}  // namespace attention
}  // namespace tpserve

#endif  // TPSERVE_WORKER_KERNELS_CUDA_PAGED_ATTENTION_TILE_CUH_
