// KvCache: this rank's paged key/value storage for every layer.
//
// The frontend's block manager hands out block ids; a sequence's block table maps its
// token position p to slot block_table[p / block_size]·block_size + p % block_size.
// Each rank stores only its own kv heads. Owned and used by the rank's compute thread.
#ifndef TPSERVE_WORKER_KV_CACHE_H_
#define TPSERVE_WORKER_KV_CACHE_H_

#include <cstdint>
#include <cstdlib>
#include <memory>
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
  int bytes_per_element = 4;  // 4: fp32; 2: bf16 (the CPU's bf16 mode, the CUDA bf16 cache)

  int64_t num_slots() const { return int64_t{num_blocks} * block_size; }
  // Bytes for all layers' keys and values.
  int64_t bytes() const;
};

// The host memory that can be allocated now without swapping (/proc/meminfo's
// MemAvailable): the most a CPU rank's KV cache may take.
int64_t AvailableHostBytes();

class KvCache {
 public:
  // InvalidArgument on non-positive sizes or an element size other than 4 (fp32) or 2
  // (bf16); ResourceExhausted for a cache larger than max_bytes or one the allocator
  // refuses.
  static absl::StatusOr<KvCache> Create(const KvCacheShape& shape, int64_t max_bytes);

  const KvCacheShape& shape() const { return shape_; }
  bool bf16() const { return shape_.bytes_per_element == 2; }

  // Key and value of one slot, layer `layer`: [num_kv_heads, head_dim] / [.., v_head_dim],
  // as fp32 (an fp32 cache) or bf16 bits (a bf16 cache; values rounded to nearest even
  // when written). Calling the other kind's accessor is a bug (checked).
  float* key(int layer, int64_t slot) { return &F32(keys_, layer)[slot * key_stride_]; }
  float* value(int layer, int64_t slot) { return &F32(values_, layer)[slot * value_stride_]; }
  const float* key(int layer, int64_t slot) const {
    return &F32(keys_, layer)[slot * key_stride_];
  }
  const float* value(int layer, int64_t slot) const {
    return &F32(values_, layer)[slot * value_stride_];
  }
  uint16_t* key_bf16(int layer, int64_t slot) { return &Bf16(keys_, layer)[slot * key_stride_]; }
  uint16_t* value_bf16(int layer, int64_t slot) {
    return &Bf16(values_, layer)[slot * value_stride_];
  }
  const uint16_t* key_bf16(int layer, int64_t slot) const {
    return &Bf16(keys_, layer)[slot * key_stride_];
  }
  const uint16_t* value_bf16(int layer, int64_t slot) const {
    return &Bf16(values_, layer)[slot * value_stride_];
  }

 private:
  // One layer's storage: [num_slots, n_kv, head_dim] elements of the cache's dtype, at the
  // first 64-byte boundary of a block of its own (AllocateZeroed's for a bf16 cache, huge
  // pages asked for; calloc's for fp32; not the tensor recycler's, whose blocks are
  // activations').
  struct FreeStorage {
    void operator()(void* p) const { std::free(p); }
  };
  struct Layer {
    std::unique_ptr<void, FreeStorage> storage;
    void* data = nullptr;
  };
  float* F32(std::vector<Layer>& layers, int layer) const;
  const float* F32(const std::vector<Layer>& layers, int layer) const;
  uint16_t* Bf16(std::vector<Layer>& layers, int layer) const;
  const uint16_t* Bf16(const std::vector<Layer>& layers, int layer) const;

  explicit KvCache(const KvCacheShape& shape);
  KvCacheShape shape_;
  int64_t key_stride_, value_stride_;
  std::vector<Layer> keys_;    // per layer: [num_slots, n_kv, head_dim]
  std::vector<Layer> values_;  // per layer: [num_slots, n_kv, v_head_dim]
};

}  // namespace tpserve

#endif  // TPSERVE_WORKER_KV_CACHE_H_
