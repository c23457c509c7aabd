// CUDA rotary position embedding of q and k, in place, HF "rotate_half" layout (element
// i pairs with i + head_dim/2), optionally preceded by a per-head RMSNorm (Qwen3's
// q_norm / k_norm) in the same pass. The CPU reference is RmsNorm per head followed by
// RotaryEmbedding::Apply (worker/kernels/cpu/), and RotaryEmbedding::CosSinTable builds
// the cos/sin table this kernel reads, so both rotate by the same angles.
//
// T is float or __nv_bfloat16; the math is fp32 and each element is rounded to T once.
// One warp per head. Launches on `stream` and returns the launch's error
// (cudaErrorInvalidValue for invalid sizes, cudaSuccess without a launch for empty ones);
// no allocation, no sync, and the launch shape depends only on the sizes, so the launch
// can be graph-captured.
#ifndef TPSERVE_WORKER_KERNELS_CUDA_ROPE_H_
#define TPSERVE_WORKER_KERNELS_CUDA_ROPE_H_

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace tpserve {

// The largest head_dim LaunchRope takes (any even head_dim up to it works).
inline constexpr int kRopeMaxHeadDim = 512;

// Row t of qkv holds the q heads at columns [0, nq·d) and the k heads at
// [nq·d, (nq + nkv)·d); both are rotated by positions[t], the rest of the row (v) is left
// untouched. With q_norm (k_norm) set, each q (k) head is first RMSNormed with that
// weight and eps. Caller guarantees 0 ≤ positions[t] < the table's rows.
template <typename T>
cudaError_t LaunchRope(T* qkv,  // [n, row_stride], row_stride ≥ (nq + nkv)·head_dim
                       int64_t row_stride,
                       const int32_t* positions,  // [n]
                       int64_t n, int num_q_heads, int num_kv_heads, int head_dim,
                       const float* cos_sin,  // [max_positions, head_dim]: [cos | sin]
                       const T* q_norm,       // [head_dim] or null
                       const T* k_norm,       // [head_dim] or null
                       float eps, cudaStream_t stream);

// Where LaunchRopeWriteKv puts one layer's new keys and values: the paged cache, as
// LaunchWriteKv (paged_attention.h) lays it out.
template <typename T>
struct RopeCacheWrite {
  const int64_t* slots = nullptr;  // [n]; slots[t] < 0: token t is padding, writes nothing
  T* k_cache = nullptr;            // [num_slots, nkv, head_dim]
  T* v_cache = nullptr;            // [num_slots, nkv, v_head_dim]
  int64_t v_col = 0;               // the v heads' first column in a qkv row
  int v_head_dim = 0;
};

// LaunchRope and LaunchWriteKv in one pass: q heads are normed and rotated in place as
// LaunchRope does; k heads are normed and rotated into k_cache[slots[t]] (qkv's k columns
// keep their unrotated values); v heads, columns [v_col, v_col + nkv·v_head_dim), are
// copied bit for bit into v_cache[slots[t]]. One launch instead of two, and the keys are
// read once. Needs num_kv_heads ≥ 1 and the row to hold the v heads.
template <typename T>
cudaError_t LaunchRopeWriteKv(T* qkv, int64_t row_stride, const int32_t* positions, int64_t n,
                              int num_q_heads, int num_kv_heads, int head_dim,
                              const float* cos_sin, const T* q_norm, const T* k_norm, float eps,
                              const RopeCacheWrite<T>& cache, cudaStream_t stream);

}  // namespace tpserve

#endif  // TPSERVE_WORKER_KERNELS_CUDA_ROPE_H_
