// CUDA paged attention over the KV cache, and the KV-cache write that precedes it.
//
// The GPU twin of worker/kernels/cpu/paged_attention.h, with the same cache layout: per
// layer, keys [num_slots, num_kv_heads, head_dim] and values [num_slots, num_kv_heads,
// v_head_dim]; position p of a sequence lives in slot
// block_table[p / block_size]·block_size + p % block_size.
//
// Contract:
//  - Every pointer is a device pointer; launches go on `stream` and callers synchronise.
//  - Launchers never allocate and never synchronise. The launch configuration depends only
//    on host size arguments, so a launch can be captured once in a CUDA graph and replayed
//    with other device data (lengths, block tables, slots) within the same bounds.
//  - T is float or __nv_bfloat16; arithmetic and the softmax run in fp32.
//  - Return: the launch's error (cudaGetLastError), cudaSuccess without a launch for empty
//    sizes, cudaErrorInvalidValue for unsupported sizes (head_dim or v_head_dim outside
//    [1, 256], num_heads not a multiple of num_kv_heads, a missing workspace, ...).
// Thread-compatible: launchers hold no state.
#ifndef TPSERVE_WORKER_KERNELS_CUDA_PAGED_ATTENTION_H_
#define TPSERVE_WORKER_KERNELS_CUDA_PAGED_ATTENTION_H_

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace tpserve {

// One step's batch on the device. The int sizes are host values; max_query_len and
// max_context_len are upper bounds over the sequences (the kernels read the actual lengths
// from device memory), so one launch configuration serves every batch within the bounds.
struct AttentionMetadata {
  const int32_t* query_start = nullptr;   // [num_seqs + 1]: sequence s's new tokens are rows
                                          // [query_start[s], query_start[s+1]) of q and out
  const int32_t* context_lens = nullptr;  // [num_seqs]: tokens in the cache after this step,
                                          // the new ones included
  const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq], row-major
  int num_seqs = 0;
  int num_tokens = 0;          // rows of q and out
  int max_blocks_per_seq = 0;  // must cover max_context_len: ≥ ⌈max_context_len / block_size⌉
  int max_query_len = 0;       // ≥ every sequence's new tokens; 1 selects the decode tiles
  int max_context_len = 0;     // ≥ every context_lens[s]
};

// Copies the new tokens' keys and values from the fused qkv projection into the cache.
//   qkv: [num_tokens, row_stride]; token t's keys are qkv[t·row_stride + k_col ...) as
//        [num_kv_heads, head_dim], its values at v_col as [num_kv_heads, v_head_dim]
//   slots: [num_tokens]; slots[t] < 0 skips token t (padding in a captured batch)
//   k_cache: [num_slots, num_kv_heads, head_dim], v_cache: [num_slots, num_kv_heads,
//   v_head_dim] (one layer)
template <typename T>
cudaError_t LaunchWriteKv(const T* qkv, int64_t row_stride, int64_t k_col, int64_t v_col,
                          const int64_t* slots, int64_t num_tokens, int num_kv_heads, int head_dim,
                          int v_head_dim, T* k_cache, T* v_cache, cudaStream_t stream);

// Bytes of fp32 scratch LaunchPagedAttention needs for these sizes (0: none). Long contexts
// with too few (sequence, kv head) pairs to fill the GPU are split across CTAs
// (flash-decoding) and merged by a second kernel through this scratch. Reads only the host
// sizes of `meta`; a captured graph needs the workspace of its own sizes.
size_t PagedAttentionWorkspaceBytes(const AttentionMetadata& meta, int num_heads, int num_kv_heads,
                                    int head_dim, int v_head_dim);

// Causal attention of every new token over its sequence's cached prefix. Query token i of
// sequence s (num_new of them) sits at position p = context_lens[s] − num_new + i and
// attends to positions [max(0, p − sliding_window + 1), p] (sliding_window 0: all of
// [0, p]); query head h reads kv head h / (num_heads / num_kv_heads). The new tokens' keys
// and values must already be in the cache (LaunchWriteKv, or rope.h's LaunchRopeWriteKv).
// Rows of `out` outside every sequence (padding) are left untouched.
//   q: token t, head h at q[t·q_row_stride + h·head_dim ...+ head_dim)
//   k_cache: [num_slots, num_kv_heads, head_dim], v_cache: [num_slots, num_kv_heads,
//   v_head_dim] (one layer)
//   out: [num_tokens, num_heads·v_head_dim]
//   workspace: PagedAttentionWorkspaceBytes(...) bytes, 16-byte aligned; may be null when
//   that is 0
template <typename T>
cudaError_t LaunchPagedAttention(const T* q, int64_t q_row_stride, const T* k_cache,
                                 const T* v_cache, const AttentionMetadata& meta, int block_size,
                                 int num_heads, int num_kv_heads, int head_dim, int v_head_dim,
                                 float scale, int sliding_window, T* out, float* workspace,
                                 cudaStream_t stream);

}  // namespace tpserve

#endif  // TPSERVE_WORKER_KERNELS_CUDA_PAGED_ATTENTION_H_
