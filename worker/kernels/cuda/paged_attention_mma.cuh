// Device code of the tensor-core prefill tiles of paged attention (bf16; see
// paged_attention.h for the contract, paged_attention_tile.cuh for the SIMT tiles that
// serve fp32, decode and the head dims these do not). Included only by
// paged_attention.cu.
//
// Same work split as the SIMT prefill tiles: one CTA owns 64 rows — (new token, query
// head of the kv head's group) pairs, token-major — of one sequence, one kv head and one
// split of the context, so MakePlan's grid and split-K merge serve both. Each of the 4
// warps owns 16 rows and keeps, in registers, its Q fragments, an fp32 online softmax
// (exp2 domain) and its output. The CTA walks the visible keys 64 at a time; keys and
// values come through the block table into double-buffered shared memory with cp.async,
// the next tile's copies in flight while this one is computed. S = Q·Kᵀ and O += P·V are
// m16n8k16 MMAs (mma.cuh); P goes from S's accumulators to A fragments without shared
// memory.
#ifndef TPSERVE_WORKER_KERNELS_CUDA_PAGED_ATTENTION_MMA_CUH_
#define TPSERVE_WORKER_KERNELS_CUDA_PAGED_ATTENTION_MMA_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "worker/kernels/cuda/mma.cuh"
#include "worker/kernels/cuda/paged_attention_tile.cuh"

namespace tpserve {
namespace attention {

// Shared memory and register shapes for head dims d, dv ≤ kMaxD, both multiples of 16.
template <int kMaxD>
struct MmaTile {
  static constexpr int kRows = 64, kKeys = 64, kWarpRows = 16;
  static constexpr int kKSteps = kMaxD / 16;  // 16-wide k steps of Q·Kᵀ (over d)
  static constexpr int kNTiles = kMaxD / 8;   // 8-wide output column tiles (over dv)
  static constexpr int kKeyTiles = kKeys / 8;
  static_assert(kRows == kWarps * kWarpRows, "one 16-row MMA tile per warp");
  static_assert(kMaxD % 16 == 0 && kMaxD <= 128, "kMaxD: 32, 64 or 128");

  // An odd number of 16-byte chunks per row: the 8 rows a fragment load touches fall in
  // 8 different bank groups.
  __host__ __device__ static int Stride(int dim) { return dim + 8; }
  __host__ __device__ static size_t SmemBytes(int d, int dv) {
    return 2 * (sizeof(int64_t) * kKeys +
                sizeof(__nv_bfloat16) * kKeys * (Stride(d) + Stride(dv)));
  }
};

// One buffer of staged keys: slots and the K, V rows of kKeys positions.
struct MmaBuffer {
  int64_t* slot;    // [kKeys]
  __nv_bfloat16* k;  // [kKeys, Stride(d)]
  __nv_bfloat16* v;  // [kKeys, Stride(dv)]
};

template <typename L>
__device__ __forceinline__ MmaBuffer CarveBuffer(unsigned char* smem, int buf, int d, int dv) {
  const size_t bytes = L::SmemBytes(d, dv) / 2;
  MmaBuffer b;
  b.slot = reinterpret_cast<int64_t*>(smem + buf * bytes);
  b.k = reinterpret_cast<__nv_bfloat16*>(b.slot + L::kKeys);
  b.v = b.k + L::kKeys * L::Stride(d);
  return b;
}

// A warp's rows: the lane's two rows (g and g + 8 of the warp's 16) and what they see.
struct LaneRows {
  int lo[2], hi[2];  // visible positions [lo, hi]; hi = −1 for a row past the tile
};

template <typename L>
__device__ __forceinline__ LaneRows LocateLaneRows(const AttentionArgs<__nv_bfloat16>& a,
                                                   const RowTile& t, int warp_row0) {
  LaneRows r;
  const int g = threadIdx.x % 32 / 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = warp_row0 + g + 8 * h;
    const int pos = t.first_pos + (t.row0 + row) / a.group;
    r.lo[h] = row < t.num_rows ? VisibleFrom(pos, a.sliding_window) : 0;
    r.hi[h] = row < t.num_rows ? pos : -1;
  }
  return r;
}

// The lane's A fragments of its warp's 16 query rows over all d (zeros past the tile's
// rows and past d).
template <typename L>
__device__ __forceinline__ void LoadQueryFragments(const AttentionArgs<__nv_bfloat16>& a,
                                                   const RowTile& t, int warp_row0,
                                                   uint32_t (&q)[L::kKSteps][4]) {
  const int lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
  const __nv_bfloat16* rows[2] = {nullptr, nullptr};
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = warp_row0 + g + 8 * h;
    if (row < t.num_rows) {
      const int64_t token = t.q_begin + (t.row0 + row) / a.group;
      const int head = t.kv_head * a.group + (t.row0 + row) % a.group;
      rows[h] = a.q + token * a.q_row_stride + int64_t{head} * a.head_dim;
    }
  }
#pragma unroll
  for (int kk = 0; kk < L::kKSteps; ++kk) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int col = kk * 16 + 2 * tq + 8 * (r / 2);
      const __nv_bfloat16* row = rows[r % 2];
      q[kk][r] = row != nullptr && col < a.head_dim ? LoadVec<uint32_t>(row + col) : 0u;
    }
  }
}

// s = Q·Kᵀ over the buffer's keys, scaled to the exp2 domain and masked: key k0 + j·8 +
// 2t + (r % 2) for the lane's row r / 2.
template <typename L>
__device__ __forceinline__ void ScoreKeys(const AttentionArgs<__nv_bfloat16>& a,
                                          const MmaBuffer& buf, const uint32_t (&q)[L::kKSteps][4],
                                          const LaneRows& rows, int k0, int key_end,
                                          float (&s)[L::kKeyTiles][4]) {
  const int lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
  const int stride = L::Stride(a.head_dim), k_steps = a.head_dim / 16;
#pragma unroll
  for (int j = 0; j < L::kKeyTiles; ++j) {
#pragma unroll
    for (int r = 0; r < 4; ++r) s[j][r] = 0.0f;
    const __nv_bfloat16* key_row = buf.k + (j * 8 + g) * stride + 2 * tq;
#pragma unroll
    for (int kk = 0; kk < L::kKSteps; ++kk) {
      if (kk < k_steps) {
        const uint32_t b0 = LoadVec<uint32_t>(key_row + kk * 16);
        const uint32_t b1 = LoadVec<uint32_t>(key_row + kk * 16 + 8);
        mma::MmaBf16(s[j], q[kk], b0, b1);
      }
    }
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int p = k0 + j * 8 + 2 * tq + r % 2, h = r / 2;
      const bool visible = p < key_end && p >= rows.lo[h] && p <= rows.hi[h];
      s[j][r] = visible ? s[j][r] * a.scale_log2 : -INFINITY;
    }
  }
}

// Online softmax over the tile: the lane's scores become probabilities against the
// updated running max of their row, and the running (lane-partial) sums and outputs are
// rescaled. A row is shared by the 4 lanes of a group (xor 1, 2).
template <typename L>
__device__ __forceinline__ void SoftmaxKeys(float (&s)[L::kKeyTiles][4], float (&row_max)[2],
                                            float (&row_sum)[2], float (&o)[L::kNTiles][4]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float tile_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < L::kKeyTiles; ++j) {
      tile_max = fmaxf(tile_max, fmaxf(s[j][2 * h], s[j][2 * h + 1]));
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
    const float new_max = fmaxf(row_max[h], tile_max);
    const float base = new_max == -INFINITY ? 0.0f : new_max;  // no key seen yet
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < L::kKeyTiles; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        s[j][2 * h + e] = exp2f(s[j][2 * h + e] - base);
        sum += s[j][2 * h + e];
      }
    }
    const float rescale = exp2f(row_max[h] - base);
    row_sum[h] = row_sum[h] * rescale + sum;
    row_max[h] = new_max;
#pragma unroll
    for (int n = 0; n < L::kNTiles; ++n) o[n][2 * h] *= rescale, o[n][2 * h + 1] *= rescale;
  }
}

// o += P·V over the buffer's keys; p holds the probabilities as ScoreKeys laid them out.
template <typename L>
__device__ __forceinline__ void AccumulateKeys(const AttentionArgs<__nv_bfloat16>& a,
                                               const MmaBuffer& buf,
                                               const float (&p)[L::kKeyTiles][4],
                                               float (&o)[L::kNTiles][4]) {
  const int lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
  const int stride = L::Stride(a.v_head_dim), n_tiles = a.v_head_dim / 8;
#pragma unroll
  for (int kk = 0; kk < L::kKeys / 16; ++kk) {
    uint32_t pa[4];
    mma::PackA(p[2 * kk], p[2 * kk + 1], pa);
    // B[k][n] = V[key kk·16 + k][column n]: lane (g, t) takes keys 2t, 2t + 1 (+8) of
    // column g of each 8-column tile.
    const __nv_bfloat16* v0 = buf.v + (kk * 16 + 2 * tq) * stride + g;
#pragma unroll
    for (int n = 0; n < L::kNTiles; ++n) {
      if (n < n_tiles) {
        const __nv_bfloat16* v = v0 + n * 8;
        const uint32_t b0 = mma::JoinBf16(v[0], v[stride]);
        const uint32_t b1 = mma::JoinBf16(v[8 * stride], v[9 * stride]);
        mma::MmaBf16(o[n], pa, b0, b1);
      }
    }
  }
}

// The lane's two rows: normalised into `out`, or unnormalised with their max and sum into
// the split's partials (the SIMT tiles' layout, merged by MergeSplitsKernel).
template <typename L>
__device__ __forceinline__ void StoreLaneRows(const AttentionArgs<__nv_bfloat16>& a,
                                              const RowTile& t, int warp_row0,
                                              const float (&row_max)[2], float (&row_sum)[2],
                                              const float (&o)[L::kNTiles][4]) {
  const int lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
  const int dv = a.v_head_dim, n_tiles = dv / 8;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 1);
    row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 2);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = warp_row0 + g + 8 * h;
    const int64_t token = t.q_begin + (t.row0 + row) / a.group;
    if (row >= t.num_rows || token >= a.num_tokens) continue;
    const int64_t out_row = token * a.num_heads + t.kv_head * a.group + (t.row0 + row) % a.group;
    if (a.num_splits == 1) {
      const float inv_sum = 1.0f / row_sum[h];
      __nv_bfloat16* out = a.out + out_row * dv + 2 * tq;
#pragma unroll
      for (int n = 0; n < L::kNTiles; ++n) {
        if (n < n_tiles) {
          StoreVec(out + n * 8, mma::PackBf16(o[n][2 * h] * inv_sum, o[n][2 * h + 1] * inv_sum));
        }
      }
    } else {
      const int64_t part = int64_t{t.split} * a.num_tokens * a.num_heads + out_row;
      float* out = a.partial_out + part * dv + 2 * tq;
#pragma unroll
      for (int n = 0; n < L::kNTiles; ++n) {
        if (n < n_tiles) StoreVec(out + n * 8, make_float2(o[n][2 * h], o[n][2 * h + 1]));
      }
      if (tq == 0) a.partial_max[part] = row_max[h], a.partial_sum[part] = row_sum[h];
    }
  }
}

// grid: (row tiles, num_seqs, num_kv_heads·num_splits); kThreads threads;
// MmaTile<kMaxD>::SmemBytes(d, dv). Requires d, dv multiples of 16 and ≤ kMaxD, 16-byte
// aligned caches, an even q_row_stride and a 4-byte aligned q.
template <int kMaxD>
__global__ void __launch_bounds__(kThreads, 2)
    PagedAttentionMmaKernel(const AttentionArgs<__nv_bfloat16> a) {
  using L = MmaTile<kMaxD>;
  TPSERVE_DYNAMIC_SMEM(smem);
  const RowTile t = LocateTile(a, L::kRows);
  if (t.num_rows <= 0) return;  // the whole CTA: past this sequence's rows

  // Keys any row of the tile sees, within this CTA's split.
  const int split_begin = t.split * a.split_keys;
  const int key_begin =
      max(VisibleFrom(t.first_pos + t.row0 / a.group, a.sliding_window), split_begin);
  int key_end = min(t.first_pos + (t.row0 + t.num_rows - 1) / a.group + 1, a.max_positions);
  if (t.split + 1 < a.num_splits) key_end = min(key_end, split_begin + a.split_keys);

  const int warp_row0 = threadIdx.x / 32 * L::kWarpRows;
  const bool warp_has_rows = warp_row0 < t.num_rows;
  uint32_t q[L::kKSteps][4];
  LoadQueryFragments<L>(a, t, warp_row0, q);
  const LaneRows rows = LocateLaneRows<L>(a, t, warp_row0);
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f}, o[L::kNTiles][4];
#pragma unroll
  for (int n = 0; n < L::kNTiles; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;

  const int32_t* table = a.block_tables + int64_t{t.seq} * a.max_blocks_per_seq;
  auto slot_of = [&](int p) -> int64_t {
    return p < key_end ? int64_t{table[p / a.block_size]} * a.block_size + p % a.block_size : -1;
  };
  auto buffer = [&](int i) { return CarveBuffer<L>(smem, i % 2, a.head_dim, a.v_head_dim); };
  auto stage = [&](const MmaBuffer& b) {
    StageRows<__nv_bfloat16, L::kKeys>(a.k_cache, int64_t{a.num_kv_heads} * a.head_dim,
                                       int64_t{t.kv_head} * a.head_dim, a.head_dim,
                                       a.head_dim / 8, L::Stride(a.head_dim), b.slot, true, b.k);
    StageRows<__nv_bfloat16, L::kKeys>(a.v_cache, int64_t{a.num_kv_heads} * a.v_head_dim,
                                       int64_t{t.kv_head} * a.v_head_dim, a.v_head_dim,
                                       a.v_head_dim / 8, L::Stride(a.v_head_dim), b.slot, true,
                                       b.v);
    CommitCopies();
  };

  if (key_begin < key_end) {
    const MmaBuffer first = buffer(0);
    if (threadIdx.x < L::kKeys) first.slot[threadIdx.x] = slot_of(key_begin + threadIdx.x);
    __syncthreads();
    stage(first);
  }
  for (int k0 = key_begin, i = 0; k0 < key_end; k0 += L::kKeys, ++i) {
    const MmaBuffer cur = buffer(i);
    if (k0 + L::kKeys < key_end) {
      const MmaBuffer next = buffer(i + 1);
      if (threadIdx.x < L::kKeys) next.slot[threadIdx.x] = slot_of(k0 + L::kKeys + threadIdx.x);
      __syncthreads();  // next's slots written; every warp is done with next's last tile
      stage(next);
      WaitCopies<1>();  // this thread's copies of `cur` landed; next's may be in flight
    } else {
      WaitCopies<0>();
    }
    __syncthreads();  // every thread's copies of `cur` landed
    if (warp_has_rows) {
      float s[L::kKeyTiles][4];
      ScoreKeys<L>(a, cur, q, rows, k0, key_end, s);
      SoftmaxKeys<L>(s, row_max, row_sum, o);
      AccumulateKeys<L>(a, cur, s, o);
    }
  }
  if (warp_has_rows) StoreLaneRows<L>(a, t, warp_row0, row_max, row_sum, o);
}

}  // namespace attention
}  // namespace tpserve

#endif  // TPSERVE_WORKER_KERNELS_CUDA_PAGED_ATTENTION_MMA_CUH_
