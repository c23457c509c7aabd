// Host side of paged attention: size checks, the tile shape and split-K plan, launches.
#include "worker/kernels/cuda/paged_attention.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <type_traits>

#include "worker/kernels/cuda/launch.cuh"
#include "worker/kernels/cuda/paged_attention_mma.cuh"
#include "worker/kernels/cuda/paged_attention_tile.cuh"

namespace tpserve {
namespace {

using attention::AttentionArgs;
using attention::kThreads;
using attention::MergeArgs;
using attention::MmaTile;
using attention::Tile;

constexpr int kMaxHeadDim = 256;
constexpr int kTargetCtas = 2 * 132;  // two CTAs per SM of an H100/H200
constexpr int kMinSplitKeys = 128;    // a shorter split costs more to merge than it saves
constexpr int kMaxSplits = 64;
constexpr size_t kDefaultSmem = 48 << 10;

// Tiles: decode (one token per sequence) takes the kv head's group of heads against 64
// keys at a time; prefill and mixed batches take 64 (token, head) rows against 32 keys
// (32 rows when a head has more than 128 dims, to stay in registers).
constexpr int TileRows(bool decode, int max_dim) { return decode ? 8 : max_dim > 128 ? 32 : 64; }
constexpr int TileKeys(bool decode) { return decode ? 64 : 32; }
constexpr int DimBucket(int dim) {
  return dim <= 32 ? 32 : dim <= 64 ? 64 : dim <= 128 ? 128 : 256;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The launch shape, from host sizes only (so a captured graph replays any batch within them).
struct Plan {
  bool decode;
  int max_dim;        // DimBucket(max(head_dim, v_head_dim))
  int64_t row_tiles;  // per sequence and kv head
  int num_splits;
  int split_keys;  // context positions per split
};

Plan MakePlan(const AttentionMetadata& meta, int num_heads, int num_kv_heads, int head_dim,
              int v_head_dim) {
  Plan plan;
  plan.decode = meta.max_query_len == 1;
  plan.max_dim = DimBucket(std::max(head_dim, v_head_dim));
  const int64_t group = num_heads / num_kv_heads;
  plan.row_tiles = CeilDiv(meta.max_query_len * group, TileRows(plan.decode, plan.max_dim));
  plan.num_splits = 1;
  plan.split_keys = meta.max_context_len;
  const int64_t ctas = plan.row_tiles * meta.num_seqs * num_kv_heads;
  if (ctas < kTargetCtas && meta.max_context_len >= 2 * kMinSplitKeys) {
    const int64_t splits = std::min<int64_t>(
        {CeilDiv(kTargetCtas, ctas), meta.max_context_len / kMinSplitKeys, kMaxSplits});
    const int keys = TileKeys(plan.decode);
    plan.split_keys = static_cast<int>(CeilDiv(CeilDiv(meta.max_context_len, splits), keys) * keys);
    plan.num_splits = static_cast<int>(CeilDiv(meta.max_context_len, plan.split_keys));
  }
  return plan;
}

bool ValidSizes(const AttentionMetadata& meta, int64_t q_row_stride, int block_size, int num_heads,
                int num_kv_heads, int head_dim, int v_head_dim, int sliding_window) {
  return meta.num_seqs >= 0 && meta.num_tokens >= 0 && meta.max_query_len >= 0 &&
         meta.max_context_len >= 0 && meta.max_blocks_per_seq >= 0 && block_size >= 1 &&
         num_kv_heads >= 1 && num_heads >= num_kv_heads && num_heads % num_kv_heads == 0 &&
         head_dim >= 1 && head_dim <= kMaxHeadDim && v_head_dim >= 1 && v_head_dim <= kMaxHeadDim &&
         sliding_window >= 0 && q_row_stride >= int64_t{num_heads} * head_dim &&
         int64_t{meta.max_blocks_per_seq} * block_size >= meta.max_context_len;
}

// One launch of an attention kernel over the plan's grid, its shared-memory limit first
// raised to `max_smem` (the bucket's maximum: the same value on every call and thread).
template <typename Kernel, typename T>
cudaError_t LaunchOnGrid(Kernel kernel, size_t max_smem, size_t smem, const AttentionArgs<T>& args,
                         const Plan& plan, int num_seqs, cudaStream_t stream) {
  if (max_smem > kDefaultSmem) {
    const cudaError_t err = cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(max_smem));
    if (err != cudaSuccess) return err;
  }
  const dim3 grid(static_cast<unsigned>(plan.row_tiles), num_seqs,
                  args.num_kv_heads * plan.num_splits);
  return LaunchKernel(kernel, grid, kThreads, smem, stream, args);
}

template <typename T, int kMaxD, bool kDecode>
cudaError_t LaunchTiles(const AttentionArgs<T>& args, const Plan& plan, int num_seqs,
                        cudaStream_t stream) {
  constexpr int kRows = TileRows(kDecode, kMaxD), kKeys = TileKeys(kDecode);
  using Layout = Tile<T, kMaxD, kRows, kKeys>;
  return LaunchOnGrid(attention::PagedAttentionKernel<T, kMaxD, kRows, kKeys>,
                      Layout::SmemBytes(kMaxD, kMaxD),
                      Layout::SmemBytes(args.head_dim, args.v_head_dim), args, plan, num_seqs,
                      stream);
}

// The tensor-core prefill tiles: bf16 head dims that are multiples of 16 (up to 128),
// with rows aligned for their 32-bit fragment loads and 16-byte cache copies.
bool MmaTilesFit(const AttentionArgs<__nv_bfloat16>& args) {
  return args.head_dim % 16 == 0 && args.v_head_dim % 16 == 0 && args.k_vector &&
         args.v_vector && args.q_row_stride % 2 == 0 && Aligned(args.q, 4) && Aligned(args.out, 4);
}

template <int kMaxD>
cudaError_t LaunchMmaTiles(const AttentionArgs<__nv_bfloat16>& args, const Plan& plan,
                           int num_seqs, cudaStream_t stream) {
  using Layout = MmaTile<kMaxD>;
  static_assert(Layout::kRows == TileRows(false, kMaxD), "MakePlan's row tiles");
  return LaunchOnGrid(attention::PagedAttentionMmaKernel<kMaxD>, Layout::SmemBytes(kMaxD, kMaxD),
                      Layout::SmemBytes(args.head_dim, args.v_head_dim), args, plan, num_seqs,
                      stream);
}

template <typename T, int kMaxD>
cudaError_t LaunchBucket(const AttentionArgs<T>& args, const Plan& plan, int num_seqs,
                         cudaStream_t stream) {
  if (plan.decode) return LaunchTiles<T, kMaxD, true>(args, plan, num_seqs, stream);
  if constexpr (std::is_same_v<T, __nv_bfloat16> && kMaxD <= 128) {
    if (MmaTilesFit(args)) return LaunchMmaTiles<kMaxD>(args, plan, num_seqs, stream);
  }
  return LaunchTiles<T, kMaxD, false>(args, plan, num_seqs, stream);
}

template <typename T>
AttentionArgs<T> MakeArgs(const T* q, int64_t q_row_stride, const T* k_cache, const T* v_cache,
                          const AttentionMetadata& meta, int block_size, int num_heads,
                          int num_kv_heads, int head_dim, int v_head_dim, float scale,
                          int sliding_window, const Plan& plan, T* out, float* workspace) {
  constexpr int kVec = 16 / sizeof(T);
  const int64_t partial_rows = int64_t{plan.num_splits} * meta.num_tokens * num_heads;
  AttentionArgs<T> args;
  args.q = q;
  args.q_row_stride = q_row_stride;
  args.k_cache = k_cache;
  args.v_cache = v_cache;
  args.query_start = meta.query_start;
  args.context_lens = meta.context_lens;
  args.block_tables = meta.block_tables;
  args.max_blocks_per_seq = meta.max_blocks_per_seq;
  args.block_size = block_size;
  args.max_positions =
      static_cast<int>(std::min<int64_t>(int64_t{meta.max_blocks_per_seq} * block_size, INT_MAX));
  args.num_tokens = meta.num_tokens;
  args.num_heads = num_heads;
  args.num_kv_heads = num_kv_heads;
  args.group = num_heads / num_kv_heads;
  args.head_dim = head_dim;
  args.v_head_dim = v_head_dim;
  args.scale_log2 = scale * 1.4426950408889634f;  // log2(e)
  args.sliding_window = sliding_window;
  args.num_splits = plan.num_splits;
  args.split_keys = plan.split_keys;
  args.k_vector = head_dim % kVec == 0 && Aligned16(k_cache);
  args.v_vector = v_head_dim % kVec == 0 && Aligned16(v_cache);
  args.out = out;
  args.partial_out = plan.num_splits > 1 ? workspace : nullptr;
  args.partial_max = plan.num_splits > 1 ? workspace + partial_rows * v_head_dim : nullptr;
  args.partial_sum = plan.num_splits > 1 ? args.partial_max + partial_rows : nullptr;
  return args;
}

template <typename T>
cudaError_t LaunchForDims(const AttentionArgs<T>& args, const Plan& plan, int num_seqs,
                          cudaStream_t stream) {
  switch (plan.max_dim) {
    case 32:
      return LaunchBucket<T, 32>(args, plan, num_seqs, stream);
    case 64:
      return LaunchBucket<T, 64>(args, plan, num_seqs, stream);
    case 128:
      return LaunchBucket<T, 128>(args, plan, num_seqs, stream);
    default:
      return LaunchBucket<T, 256>(args, plan, num_seqs, stream);
  }
}

// The split partials of LaunchTiles merged into args.out.
template <typename T>
cudaError_t LaunchMerge(const AttentionArgs<T>& args, const AttentionMetadata& meta,
                        cudaStream_t stream) {
  const MergeArgs<T> merge{meta.query_start, meta.num_seqs,   meta.num_tokens,  args.num_heads,
                           args.v_head_dim,  args.num_splits, args.partial_out, args.partial_max,
                           args.partial_sum, args.out};
  return LaunchKernel(attention::MergeSplitsKernel<T>,
                      static_cast<unsigned>(int64_t{meta.num_tokens} * args.num_heads), kThreads,
                      0, stream, merge);
}

}  // namespace

size_t PagedAttentionWorkspaceBytes(const AttentionMetadata& meta, int num_heads, int num_kv_heads,
                                    int head_dim, int v_head_dim) {
  if (meta.num_seqs <= 0 || meta.num_tokens <= 0 || meta.max_query_len <= 0 ||
      meta.max_context_len <= 0 || num_kv_heads <= 0 || num_heads % num_kv_heads != 0) {
    return 0;
  }
  const Plan plan = MakePlan(meta, num_heads, num_kv_heads, head_dim, v_head_dim);
  if (plan.num_splits == 1) return 0;
  return sizeof(float) * static_cast<size_t>(plan.num_splits) * meta.num_tokens * num_heads *
         (v_head_dim + 2);
}

template <typename T>
cudaError_t LaunchPagedAttention(const T* q, int64_t q_row_stride, const T* k_cache,
                                 const T* v_cache, const AttentionMetadata& meta, int block_size,
                                 int num_heads, int num_kv_heads, int head_dim, int v_head_dim,
                                 float scale, int sliding_window, T* out, float* workspace,
                                 cudaStream_t stream) {
  if (!ValidSizes(meta, q_row_stride, block_size, num_heads, num_kv_heads, head_dim, v_head_dim,
                  sliding_window)) {
    return cudaErrorInvalidValue;
  }
  if (meta.num_seqs == 0 || meta.num_tokens == 0 || meta.max_query_len == 0 ||
      meta.max_context_len == 0) {
    return cudaSuccess;
  }
  const Plan plan = MakePlan(meta, num_heads, num_kv_heads, head_dim, v_head_dim);
  if (q == nullptr || k_cache == nullptr || v_cache == nullptr || out == nullptr ||
      meta.query_start == nullptr || meta.context_lens == nullptr || meta.block_tables == nullptr ||
      (plan.num_splits > 1 && workspace == nullptr) || plan.row_tiles > INT_MAX ||
      meta.num_seqs > 65535 || int64_t{num_kv_heads} * plan.num_splits > 65535 ||
      int64_t{meta.num_tokens} * num_heads > INT_MAX) {
    return cudaErrorInvalidValue;
  }

  const AttentionArgs<T> args =
      MakeArgs(q, q_row_stride, k_cache, v_cache, meta, block_size, num_heads, num_kv_heads,
               head_dim, v_head_dim, scale, sliding_window, plan, out, workspace);
  const cudaError_t err = LaunchForDims(args, plan, meta.num_seqs, stream);
  if (err != cudaSuccess || plan.num_splits == 1) return err;
  return LaunchMerge(args, meta, stream);
}

template cudaError_t LaunchPagedAttention<float>(const float*, int64_t, const float*, const float*,
                                                 const AttentionMetadata&, int, int, int, int, int,
                                                 float, int, float*, float*, cudaStream_t);
template cudaError_t LaunchPagedAttention<__nv_bfloat16>(const __nv_bfloat16*, int64_t,
                                                         const __nv_bfloat16*, const __nv_bfloat16*,
                                                         const AttentionMetadata&, int, int, int,
                                                         int, int, float, int, __nv_bfloat16*,
                                                         float*, cudaStream_t);

}  // namespace tpserve
