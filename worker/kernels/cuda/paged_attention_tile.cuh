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
#include <type_traits>

namespace tpserve {
namespace attention {

constexpr int kThreads = 128;  // per CTA
constexpr int kWarps = kThreads / 32;

__host__ __device__ constexpr int RoundUp(int x, int m) { return (x + m - 1) / m * m; }

// Shared memory of one CTA for head dims d, dv ≤ kMaxD. Q and scores are fp32, K and V
// stay in T. Strides are in elements.
template <typename T, int kMaxD, int kRows, int kKeys>
struct Tile {
  static constexpr int kVec = 16 / sizeof(T);    // elements per 16-byte chunk
  static constexpr int kCols = kMaxD / 32;        // output columns per lane
  static constexpr int kPvRows = kRows / kWarps;  // rows per warp (softmax, P·V)
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
  const T* k_cache;  // [num_slots, num_kv_heads, head_dim]
  const T* v_cache;  // [num_slots, num_kv_heads, v_head_dim]
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

template <typename T>
__device__ __forceinline__ float ToF32(T v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return __bfloat162float(v);
  }
}

template <typename T>
__device__ __forceinline__ T FromF32(float v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return __float2bfloat16(v);
  }
}

// f[0, N) = p[0, N), p aligned to N·sizeof(T) (16 bytes at most).
template <typename T, int N>
__device__ __forceinline__ void LoadFloats(const T* p, float* f) {
  if constexpr (std::is_same_v<T, float>) {
    if constexpr (N % 4 == 0) {
#pragma unroll
      for (int i = 0; i < N; i += 4) {
        const float4 v = *reinterpret_cast<const float4*>(p + i);
        f[i] = v.x, f[i + 1] = v.y, f[i + 2] = v.z, f[i + 3] = v.w;
      }
    } else if constexpr (N == 2) {
      const float2 v = *reinterpret_cast<const float2*>(p);
      f[0] = v.x, f[1] = v.y;
    } else {
      f[0] = p[0];
    }
  } else if constexpr (N == 1) {
    f[0] = ToF32(p[0]);
  } else {
    static_assert(N % 2 == 0);
    // bf16 pairs, in one load of min(2N, 16) bytes at a time.
    constexpr int kPairsPerLoad = N >= 8 ? 4 : N / 2;
    using Load = std::conditional_t<kPairsPerLoad == 4, uint4,
                                    std::conditional_t<kPairsPerLoad == 2, uint2, unsigned>>;
#pragma unroll
    for (int i = 0; i < N; i += 2 * kPairsPerLoad) {
      const Load raw = *reinterpret_cast<const Load*>(p + i);
      const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
      for (int j = 0; j < kPairsPerLoad; ++j) {
        const float2 v = __bfloat1622float2(pairs[j]);
        f[i + 2 * j] = v.x, f[i + 2 * j + 1] = v.y;
      }
    }
  }
}

// 16 bytes global → shared, asynchronous; zeros without reading when !valid.
__device__ __forceinline__ void CopyChunkAsync(void* smem, const void* global, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(global),
               "r"(valid ? 16 : 0)
               : "memory");
#else
  *static_cast<uint4*>(smem) = valid ? *static_cast<const uint4*>(global) : make_uint4(0, 0, 0, 0);
#endif
}

__device__ __forceinline__ void CommitCopies() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits until at most kPending of this thread's committed copy groups are in flight.
template <int kPending>
__device__ __forceinline__ void WaitCopies() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
#endif
}

__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int m = 16; m > 0; m /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, m));
  return v;
}

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int m = 16; m > 0; m /= 2) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}

__device__ __forceinline__ int VisibleFrom(int pos, int sliding_window) {
  return sliding_window > 0 ? max(0, pos - sliding_window + 1) : 0;
}

// Stages kKeys rows of one kv head into s_rows [kKeys, smem_stride]: row j from cache slot
// s_slot[j] (< 0: zeros), `chunks` 16-byte chunks of it, elements past `width` zero.
template <typename T, int kKeys>
__device__ __forceinline__ void StageRows(const T* __restrict__ cache, int64_t slot_stride,
                                          int64_t head_offset, int width, int chunks,
                                          int smem_stride, const int64_t* s_slot,
                                          bool vector, T* s_rows) {
  constexpr int kVec = 16 / sizeof(T);
  if (vector) {
    for (int i = threadIdx.x; i < kKeys * chunks; i += kThreads) {
      const int row = i / chunks, c = i - row * chunks;
      const int64_t slot = s_slot[row];
      const bool valid = slot >= 0 && c * kVec < width;
      const T* src = valid ? cache + slot * slot_stride + head_offset + c * kVec : cache;
      CopyChunkAsync(s_rows + row * smem_stride + c * kVec, src, valid);
    }
  } else {
    const int row_elems = chunks * kVec;
    for (int i = threadIdx.x; i < kKeys * row_elems; i += kThreads) {
      const int row = i / row_elems, col = i - row * row_elems;
      const int64_t slot = s_slot[row];
      s_rows[row * smem_stride + col] =
          slot >= 0 && col < width ? cache[slot * slot_stride + head_offset + col] : FromF32<T>(0);
    }
  }
}

// grid: (row tiles, num_seqs, num_kv_heads·num_splits); kThreads threads.
template <typename T, int kMaxD, int kRows, int kKeys>
__global__ void __launch_bounds__(kThreads, (Tile<T, kMaxD, kRows, kKeys>::kMinCtasPerSm))
    PagedAttentionKernel(const AttentionArgs<T> a) {
  using L = Tile<T, kMaxD, kRows, kKeys>;
  constexpr int kVec = L::kVec, kCols = L::kCols, kPvRows = L::kPvRows;
  constexpr int kScoreRows = L::kScoreRows;
  extern __shared__ __align__(16) unsigned char smem[];

  const int seq = blockIdx.y;
  const int kv_head = blockIdx.z % a.num_kv_heads, split = blockIdx.z / a.num_kv_heads;
  const int q_begin = a.query_start[seq];
  const int num_new = a.query_start[seq + 1] - q_begin;
  const int row0 = blockIdx.x * kRows;
  const int num_rows = min(kRows, num_new * a.group - row0);
  if (num_rows <= 0) return;  // the whole CTA: past this sequence's rows
  const int first_pos = a.context_lens[seq] - num_new;  // of the sequence's first new token
  const int d = a.head_dim, dv = a.v_head_dim;
  const int q_stride = L::QStride(d), k_stride = L::KStride(d), v_stride = L::VStride(dv);

  float* s_q = reinterpret_cast<float*>(smem);                         // [kRows, q_stride]
  float* s_p = s_q + kRows * q_stride;                                 // [kRows, kKeys]
  int64_t* s_slot = reinterpret_cast<int64_t*>(s_p + kRows * kKeys);  // [kKeys]
  T* s_k = reinterpret_cast<T*>(s_slot + kKeys);                       // [kKeys, k_stride]
  T* s_v = s_k + kKeys * k_stride;                                     // [kKeys, v_stride]
  int* s_lo = reinterpret_cast<int*>(s_v + kKeys * v_stride);  // [kRows] first visible key
  int* s_hi = s_lo + kRows;                                    // [kRows] last visible key

  // The tile's queries (zero past num_rows and past d) and their visible key ranges.
  for (int i = threadIdx.x; i < kRows * q_stride; i += kThreads) {
    const int r = i / q_stride, c = i - r * q_stride;
    float v = 0.0f;
    if (r < num_rows && c < d) {
      const int64_t token = q_begin + (row0 + r) / a.group;
      const int head = kv_head * a.group + (row0 + r) % a.group;
      v = ToF32(a.q[token * a.q_row_stride + int64_t{head} * d + c]) * a.scale_log2;
    }
    s_q[i] = v;
  }
  if (threadIdx.x < kRows) {
    const int r = threadIdx.x, pos = first_pos + (row0 + r) / a.group;
    s_lo[r] = r < num_rows ? VisibleFrom(pos, a.sliding_window) : 0;
    s_hi[r] = r < num_rows ? pos : -1;
  }

  // Keys any row of the tile sees, within this CTA's split.
  const int split_begin = split * a.split_keys;
  const int key_begin =
      max(VisibleFrom(first_pos + row0 / a.group, a.sliding_window), split_begin);
  int key_end = min(first_pos + (row0 + num_rows - 1) / a.group + 1, a.max_positions);
  if (split + 1 < a.num_splits) key_end = min(key_end, split_begin + a.split_keys);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int pv_row0 = warp * kPvRows, c0 = lane * kCols;  // this lane's rows and columns
  const bool warp_has_rows = pv_row0 < num_rows;
  const int key = threadIdx.x % kKeys, score_row0 = threadIdx.x / kKeys * kScoreRows;
  const int32_t* table = a.block_tables + int64_t{seq} * a.max_blocks_per_seq;
  const int k_chunks = RoundUp(d, kVec) / kVec, v_chunks = v_stride / kVec;

  float row_max[kPvRows], row_sum[kPvRows], acc[kPvRows][kCols];
#pragma unroll
  for (int i = 0; i < kPvRows; ++i) {
    row_max[i] = -INFINITY, row_sum[i] = 0.0f;
#pragma unroll
    for (int c = 0; c < kCols; ++c) acc[i][c] = 0.0f;
  }

  for (int k0 = key_begin; k0 < key_end; k0 += kKeys) {
    const int n_keys = min(kKeys, key_end - k0);
    if (threadIdx.x < kKeys) {
      const int p = k0 + threadIdx.x;
      s_slot[threadIdx.x] = threadIdx.x < n_keys ? int64_t{table[p / a.block_size]} * a.block_size +
                                                       p % a.block_size
                                                 : -1;
    }
    __syncthreads();  // s_slot written; the last tile's s_k, s_v, s_p reads are done
    StageRows<T, kKeys>(a.k_cache, int64_t{a.num_kv_heads} * d, int64_t{kv_head} * d, d,
                        k_chunks, k_stride, s_slot, a.k_vector, s_k);
    CommitCopies();
    StageRows<T, kKeys>(a.v_cache, int64_t{a.num_kv_heads} * dv, int64_t{kv_head} * dv, dv,
                        v_chunks, v_stride, s_slot, a.v_vector, s_v);
    CommitCopies();
    WaitCopies<1>();  // this thread's keys have landed; its values may still be in flight
    __syncthreads();

    // Scores: thread → key `key`, rows [score_row0, +kScoreRows); a warp shares its rows.
    {
      float s[kScoreRows];
#pragma unroll
      for (int r = 0; r < kScoreRows; ++r) s[r] = 0.0f;
      if (score_row0 < num_rows && key < n_keys) {
        const T* k_row = s_k + key * k_stride;
#pragma unroll 2
        for (int c = 0; c < k_chunks; ++c) {
          float kf[kVec];
          LoadFloats<T, kVec>(k_row + c * kVec, kf);
#pragma unroll
          for (int r = 0; r < kScoreRows; ++r) {
            const float* q_row = s_q + (score_row0 + r) * q_stride + c * kVec;
#pragma unroll
            for (int e = 0; e < kVec; e += 4) {
              const float4 qv = *reinterpret_cast<const float4*>(q_row + e);
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
        const bool visible = key < n_keys && p >= s_lo[row] && p <= s_hi[row];
        s_p[row * kKeys + key] = visible ? s[r] : -INFINITY;
      }
    }
    __syncthreads();

    // Online softmax over the warp's rows; s_p becomes the rescaled probabilities.
    if (warp_has_rows) {
#pragma unroll
      for (int i = 0; i < kPvRows; ++i) {
        float* p_row = s_p + (pv_row0 + i) * kKeys;
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
        for (int c = 0; c < kCols; ++c) acc[i][c] *= rescale;
      }
    }
    WaitCopies<0>();
    __syncthreads();  // values landed; probabilities written

    if (warp_has_rows && c0 < dv) {
#pragma unroll 2
      for (int j = 0; j < n_keys; ++j) {
        float vf[kCols];
        LoadFloats<T, kCols>(s_v + j * v_stride + c0, vf);
#pragma unroll
        for (int i = 0; i < kPvRows; ++i) {
          const float p = s_p[(pv_row0 + i) * kKeys + j];
#pragma unroll
          for (int c = 0; c < kCols; ++c) acc[i][c] = fmaf(p, vf[c], acc[i][c]);
        }
      }
    }
  }

  if (!warp_has_rows || c0 >= dv) return;
#pragma unroll
  for (int i = 0; i < kPvRows; ++i) {
    const int row = row0 + pv_row0 + i;
    const int64_t token = q_begin + row / a.group;
    if (pv_row0 + i >= num_rows || token >= a.num_tokens) break;
    const int64_t out_row = token * a.num_heads + kv_head * a.group + row % a.group;
    if (a.num_splits == 1) {
      const float inv_sum = 1.0f / row_sum[i];
      T* o = a.out + out_row * dv + c0;
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        if (c0 + c < dv) o[c] = FromF32<T>(acc[i][c] * inv_sum);
      }
    } else {
      const int64_t part = int64_t{split} * a.num_tokens * a.num_heads + out_row;
      float* o = a.partial_out + part * dv + c0;
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        if (c0 + c < dv) o[c] = acc[i][c];
      }
      if (lane == 0) a.partial_max[part] = row_max[i], a.partial_sum[part] = row_sum[i];
    }
  }
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
  for (int s = 0; s < a.num_splits; ++s) max_all = fmaxf(max_all, a.partial_max[s * rows + out_row]);
  float sum_all = 0.0f;
  for (int s = 0; s < a.num_splits; ++s) {
    sum_all += a.partial_sum[s * rows + out_row] * exp2f(a.partial_max[s * rows + out_row] - max_all);
  }
  const float inv_sum = 1.0f / sum_all;
  for (int c = threadIdx.x; c < a.v_head_dim; c += blockDim.x) {
    float o = 0.0f;
    for (int s = 0; s < a.num_splits; ++s) {
      const float w = exp2f(a.partial_max[s * rows + out_row] - max_all);
      o += w * a.partial_out[(s * rows + out_row) * a.v_head_dim + c];
    }
    a.out[out_row * a.v_head_dim + c] = FromF32<T>(o * inv_sum);
  }
}

}  // namespace attention
}  // namespace tpserve

#endif  // TPSERVE_WORKER_KERNELS_CUDA_PAGED_ATTENTION_TILE_CUH_
