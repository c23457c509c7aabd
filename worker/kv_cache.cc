#include "worker/kv_cache.h"

#include <unistd.h>

#include <fstream>
#include <new>
#include <string>

#include "absl/strings/str_cat.h"

namespace tpserve {

int64_t AvailableHostBytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (meminfo >> key >> kb >> unit) {
    if (key == "MemAvailable:") return kb * 1024;
  }
  return int64_t{sysconf(_SC_AVPHYS_PAGES)} * sysconf(_SC_PAGESIZE);  // no MemAvailable
}

int64_t KvCacheShape::bytes() const {
  return int64_t{num_layers} * num_slots() * num_kv_heads * (head_dim + v_head_dim) *
         bytes_per_element;
}

KvCache::KvCache(const KvCacheShape& shape)
    : shape_(shape),
      key_stride_(int64_t{shape.num_kv_heads} * shape.head_dim),
      value_stride_(int64_t{shape.num_kv_heads} * shape.v_head_dim),
      keys_(shape.num_layers, std::vector<float>(shape.num_slots() * key_stride_)),
      values_(shape.num_layers, std::vector<float>(shape.num_slots() * value_stride_)) {}

absl::StatusOr<KvCache> KvCache::Create(const KvCacheShape& shape, int64_t max_bytes) {
  if (shape.num_layers <= 0 || shape.num_blocks <= 0 || shape.block_size <= 0 ||
      shape.num_kv_heads <= 0 || shape.head_dim <= 0 || shape.v_head_dim <= 0 ||
      shape.bytes_per_element != sizeof(float)) {
    return absl::InvalidArgumentError(
        "KV cache dimensions must be positive (and the CPU cache holds fp32)");
  }
  if (shape.bytes() > max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "KV cache of ", shape.num_blocks, " blocks needs ", shape.bytes(), " bytes, limit ",
        max_bytes));
  }
  try {
    return KvCache(shape);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "KV cache of ", shape.num_blocks, " blocks: allocating ", shape.bytes(), " bytes failed"));
  }
}

}  // namespace tpserve
