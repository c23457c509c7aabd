// KvCache: this rank's paged key/value storage for every layer.
//
// The frontend's block manager hands out block ids; a sequence's block table maps its
// token position p to slot block_table[p / block_size]·block_size + p % block_size.
// Each rank stores only its own kv heads. Owned and used by the rank's compute thread.
#ifndef TPSERVE_WORKER_KV_CACHE_H_
#define TPSERVE_WORKER_KV_CACHE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace tpserve {

struct KvCacheShape {
  int num_layers = 0;
  int num_blocks = 0;
  int block_size = 16;
  int num_kv_heads = 0;  // on this rank
  int head_dim = 0;
  int v_head_dim = 0;
  int bytes_per_element = 4;  // fp32 on the CPU; the CUDA cache may hold bf16

  int64_t num_slots() const { return int64_t{num_blocks} * block_size; }
  // Bytes for all layers' keys and values.
  int64_t bytes() const;
};

// The host memory that can be allocated now without swapping (/proc/meminfo's
// MemAvailable): the most a CPU rank's KV cache may take.
int64_t AvailableHostBytes();

class KvCache {
 public:
  // InvalidArgument on non-positive sizes; ResourceExhausted for a cache larger than
  // max_bytes or one the allocator refuses.
  static absl::StatusOr<KvCache> Create(const KvCacheShape& shape, int64_t max_bytes);

  const KvCacheShape& shape() const { return shape_; }

  // Key and value of one slot, layer `layer`: [num_kv_heads, head_dim] / [.., v_head_dim].
  float* key(int layer, int64_t slot) { return &keys_[layer][slot * key_stride_]; }
  float* value(int layer, int64_t slot) { return &values_[layer][slot * value_stride_]; }
  const float* key(int layer, int64_t slot) const { return &keys_[layer][slot * key_stride_]; }
  const float* value(int layer, int64_t slot) const {
    return &values_[layer][slot * value_stride_];
  }

 private:
  explicit KvCache(const KvCacheShape& shape);
  KvCacheShape shape_;
  int64_t key_stride_, value_stride_;
  std::vector<std::vector<float>> keys_;    // per layer: [num_slots, n_kv, head_dim]
  std::vector<std::vector<float>> values_;  // per layer: [num_slots, n_kv, v_head_dim]
};

}  // namespace tpserve

#endif  // TPSERVE_WORKER_KV_CACHE_H_
