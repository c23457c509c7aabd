#include "worker/kv_cache.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <new>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/check.h"

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
      keys_(shape.num_layers),
      values_(shape.num_layers) {
  // Each layer's storage asks for transparent huge pages before its first touch (decode
  // attention reads a few hundred bytes of each of thousands of scattered slots: with
  // 4 KiB pages, each read can be a page walk), and is written whole here, so that every
  // page is faulted in at creation and none in the middle of a step.
  for (int l = 0; l < shape.num_layers; ++l) {
    const size_t k = shape.num_slots() * key_stride_, v = shape.num_slots() * value_stride_;
    if (bf16()) {
      keys_[l].bf16.resize(k);
      values_[l].bf16.resize(v);
      std::fill(keys_[l].bf16.begin(), keys_[l].bf16.end(), uint16_t{0});
      std::fill(values_[l].bf16.begin(), values_[l].bf16.end(), uint16_t{0});
    } else {
      keys_[l].f32.resize(k);
      values_[l].f32.resize(v);
      std::fill(keys_[l].f32.begin(), keys_[l].f32.end(), 0.0f);
      std::fill(values_[l].f32.begin(), values_[l].f32.end(), 0.0f);
    }
  }
}

float* KvCache::F32(std::vector<Layer>& layers, int layer) const {
  TPSERVE_CHECK(!bf16());
  return layers[layer].f32.data();
}
const float* KvCache::F32(const std::vector<Layer>& layers, int layer) const {
  TPSERVE_CHECK(!bf16());
  return layers[layer].f32.data();
}
uint16_t* KvCache::Bf16(std::vector<Layer>& layers, int layer) const {
  TPSERVE_CHECK(bf16());
  return layers[layer].bf16.data();
}
const uint16_t* KvCache::Bf16(const std::vector<Layer>& layers, int layer) const {
  TPSERVE_CHECK(bf16());
  return layers[layer].bf16.data();
}

absl::StatusOr<KvCache> KvCache::Create(const KvCacheShape& shape, int64_t max_bytes) {
  if (shape.num_layers <= 0 || shape.num_blocks <= 0 || shape.block_size <= 0 ||
      shape.num_kv_heads <= 0 || shape.head_dim <= 0 || shape.v_head_dim <= 0 ||
      (shape.bytes_per_element != 4 && shape.bytes_per_element != 2)) {
    return absl::InvalidArgumentError(
        "KV cache dimensions must be positive, and its elements fp32 (4 bytes) or bf16 (2)");
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
