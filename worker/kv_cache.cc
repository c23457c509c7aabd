#include "worker/kv_cache.h"

#include <unistd.h>

#include <cstring>
#include <fstream>
#include <new>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "worker/tensor.h"

namespace tpserve {
namespace {

// A layer's storage starts on a cache line, so that no head's row spans one more line
// than it must (AllocateZeroed's blocks start 16 bytes past one).
constexpr uintptr_t kAlignment = 64;

}  // namespace

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
  // A bf16 cache's layers ask for transparent huge pages before their first touch: the
  // AVX2 and AMX kernels read a few hundred bytes of each of thousands of scattered slots
  // where they lie, and with 4 KiB pages each read can be a page walk (the AVX2 decode
  // kernel 1.4–1.6x faster at 1,024–4,096 positions on huge pages). An fp32 cache's do
  // not: the sgemm path, which gathers rows into a buffer, measured 1.05–1.2x slower
  // over a bf16 cache on huge pages (attention_benchmark, docs/perf.md). Either is
  // written whole here, so that every page is faulted in at creation and none in the
  // middle of a step.
  const bool huge = bf16();
  const auto layer = [huge](int64_t bytes) {
    Layer l;
    l.storage.reset(huge ? AllocateZeroed(bytes + kAlignment)
                         : std::calloc(bytes + kAlignment, 1));
    if (l.storage == nullptr) throw std::bad_alloc();
    const uintptr_t at = reinterpret_cast<uintptr_t>(l.storage.get());
    l.data = reinterpret_cast<void*>((at + kAlignment - 1) & ~uintptr_t{kAlignment - 1});
    std::memset(l.data, 0, bytes);
    return l;
  };
  const int64_t slots = shape.num_slots(), element = shape.bytes_per_element;
  for (int l = 0; l < shape.num_layers; ++l) {
    keys_[l] = layer(slots * key_stride_ * element);
    values_[l] = layer(slots * value_stride_ * element);
  }
}

float* KvCache::F32(std::vector<Layer>& layers, int layer) const {
  TPSERVE_CHECK(!bf16());
  return static_cast<float*>(layers[layer].data);
}
const float* KvCache::F32(const std::vector<Layer>& layers, int layer) const {
  TPSERVE_CHECK(!bf16());
  return static_cast<float*>(layers[layer].data);
}
uint16_t* KvCache::Bf16(std::vector<Layer>& layers, int layer) const {
  TPSERVE_CHECK(bf16());
  return static_cast<uint16_t*>(layers[layer].data);
}
const uint16_t* KvCache::Bf16(const std::vector<Layer>& layers, int layer) const {
  TPSERVE_CHECK(bf16());
  return static_cast<uint16_t*>(layers[layer].data);
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
