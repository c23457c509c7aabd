#include "worker/tensor.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <map>
#include <new>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "base/check.h"
#include "base/parallel_for.h"

namespace tpserve {

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeToString(const Shape& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

namespace {

void* FreshZeroed(size_t bytes) {
  void* p = std::calloc(bytes > 0 ? bytes : 1, 1);
  if (p == nullptr) throw std::bad_alloc();
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;  // advise the whole 2 MiB pages inside
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(kHuge - 1);
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
  return p;
}

// Tensor storage starts on a 64-byte boundary, so that no 64-byte vector or tile row a
// kernel reads or writes spans two cache lines (malloc and calloc put large blocks 16 bytes
// past one). The block they returned is recorded in the 8 bytes before it.
constexpr uintptr_t kStorageAlignment = 64;

void* AlignedStorage(size_t bytes, bool zeroed) {
  if (bytes > std::numeric_limits<size_t>::max() - kStorageAlignment) throw std::bad_alloc();
  void* raw = zeroed ? FreshZeroed(bytes + kStorageAlignment)
                     : std::malloc(bytes + kStorageAlignment);
  if (raw == nullptr) throw std::bad_alloc();
  // raw is at least 16-byte aligned, so p is 16 to 64 bytes past it: room for the record.
  auto* p = reinterpret_cast<void**>(
      (reinterpret_cast<uintptr_t>(raw) + kStorageAlignment) & ~(kStorageAlignment - 1));
  p[-1] = raw;
  return p;
}

void FreeAlignedStorage(void* p) { std::free(static_cast<void**>(p)[-1]); }

class StorageRecycler {
 public:
  void* Allocate(size_t bytes, bool zeroed) {
    void* reused = nullptr;
    std::vector<void*> dropped;  // kept blocks to free, outside the lock
    {
      absl::MutexLock lock(&mu_);
      // The smallest kept block that holds it, if it is not more than twice as large.
      auto it = kept_.lower_bound(bytes);
      if (it != kept_.end() && it->first <= 2 * bytes) {
        reused = it->second;
        live_[reused] = it->first;
        live_bytes_ += it->first;
        peak_live_bytes_ = std::max(peak_live_bytes_, live_bytes_);
        kept_bytes_ -= it->first;
        kept_.erase(it);
      } else {
        // Fresh memory: kept blocks go, the largest first, until live + kept + this
        // request is within the slack above the live high-water mark.
        ++fresh_requests_;
        const size_t live_after = live_bytes_ + bytes;
        peak_live_bytes_ = std::max(peak_live_bytes_, live_after);
        const auto budget = static_cast<size_t>(peak_live_bytes_ * (1.0 + kRecycleSlack));
        while (!kept_.empty() && live_after + kept_bytes_ > budget) {
          auto largest = std::prev(kept_.end());
          kept_bytes_ -= largest->first;
          dropped.push_back(largest->second);
          kept_.erase(largest);
        }
      }
    }
    if (reused != nullptr) {
      if (zeroed) std::memset(reused, 0, bytes);  // the rest of the block is never handed out
      return reused;
    }
    for (void* p : dropped) FreeAlignedStorage(p);
    void* fresh = AlignedStorage(bytes, /*zeroed=*/true);
    absl::MutexLock lock(&mu_);
    live_[fresh] = bytes;
    live_bytes_ += bytes;
    return fresh;
  }

  void Release(void* p) {
    {
      absl::MutexLock lock(&mu_);
      auto it = live_.find(p);
      TPSERVE_CHECK(it != live_.end());  // released twice, or never allocated here
      const size_t size = it->second;
      live_.erase(it);
      live_bytes_ -= size;
      if (kept_bytes_ + size <= kRecycleMaxBytes) {
        kept_.emplace(size, p);
        kept_bytes_ += size;
        return;
      }
    }
    FreeAlignedStorage(p);
  }

  void Trim() {
    std::multimap<size_t, void*> kept;
    {
      absl::MutexLock lock(&mu_);
      kept.swap(kept_);
      kept_bytes_ = 0;
      peak_live_bytes_ = live_bytes_;
    }
    for (auto& [unused, p] : kept) FreeAlignedStorage(p);
  }

  RecycledStorage Kept() {
    absl::MutexLock lock(&mu_);
    return RecycledStorage{kept_bytes_, kept_.size(), fresh_requests_};
  }

 private:
  absl::Mutex mu_;
  std::multimap<size_t, void*> kept_ ABSL_GUARDED_BY(mu_);     // block bytes -> block
  std::unordered_map<void*, size_t> live_ ABSL_GUARDED_BY(mu_);  // handed out -> bytes
  size_t kept_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  size_t live_bytes_ ABSL_GUARDED_BY(mu_) = 0;       // the blocks' bytes, kept ones' whole
  size_t peak_live_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // since the last Trim
  size_t fresh_requests_ ABSL_GUARDED_BY(mu_) = 0;
};

StorageRecycler& Recycler() {
  static auto* recycler = new StorageRecycler;  // never destroyed: tensors may outlive main
  return *recycler;
}

}  // namespace

void* AllocateTensorStorage(size_t bytes, bool zeroed) {
  // A decode step's outputs need not be cleared (malloc).
  if (bytes < kRecycleMinBytes) return AlignedStorage(bytes, zeroed);
  return Recycler().Allocate(bytes, zeroed);
}

void ReleaseTensorStorage(void* p, size_t bytes) {
  if (p == nullptr) return;
  if (bytes < kRecycleMinBytes) return FreeAlignedStorage(p);
  Recycler().Release(p);
}

RecycledStorage RecycledTensorStorage() { return Recycler().Kept(); }

void TrimTensorStorage() { Recycler().Trim(); }

void* AllocateZeroed(size_t bytes) {
  if (bytes >= kRecycleMinBytes) Recycler().Trim();  // packed weights, at load: long-lived
  return FreshZeroed(bytes);
}

Tensor::Tensor(Shape shape)
    : shape_(std::move(shape)), data_(static_cast<size_t>(NumElements(shape_))) {}

Tensor Tensor::Uninitialized(Shape shape) {
  Tensor t;
  const auto n = static_cast<size_t>(NumElements(shape));
  t.shape_ = std::move(shape);
  // Moved in: the storage is taken over, the member keeps its zeroing allocator.
  t.data_ = std::vector<float, ZeroedAllocator<float>>(n, ZeroedAllocator<float>(false));
  return t;
}

void ReleaseMappedRows(const WeightView& view, int64_t row0, int64_t rows) {
  if (!view.file_mapped || view.data == nullptr || view.rank() != 2 || row0 < 0 || rows <= 0 ||
      row0 + rows > view.dim(0)) {
    return;
  }
  static const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto row_bytes = static_cast<uintptr_t>(view.dim(1) * DTypeSize(view.dtype));
  const uintptr_t first = reinterpret_cast<uintptr_t>(view.data) + row0 * row_bytes;
  const uintptr_t begin = (first + page - 1) & ~(page - 1);  // whole pages only
  const uintptr_t end = (first + rows * row_bytes) & ~(page - 1);
  if (end > begin) (void)::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

absl::Status CopyToBf16(const WeightView& src, int64_t row0, int64_t rows, int64_t col0,
                        int64_t cols, uint16_t* dst, int64_t dst_stride) {
  if (src.rank() != 2 || row0 < 0 || col0 < 0 || rows < 0 || cols < 0 ||
      row0 + rows > src.dim(0) || col0 + cols > src.dim(1)) {
    return absl::InvalidArgumentError(absl::StrCat("rows [", row0, ", ", row0 + rows,
                                                   ") x columns [", col0, ", ", col0 + cols,
                                                   ") are outside ", ShapeToString(src.shape)));
  }
  if (!IsFloatWeightType(src.dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("dtype ", DTypeName(src.dtype), " does not convert to bf16"));
  }
  const size_t element = DTypeSize(src.dtype);
  const int64_t width = src.dim(1);
  const uint8_t* base = static_cast<const uint8_t*>(src.data);
  const DType dtype = src.dtype;
  std::atomic<int64_t> first_bad{std::numeric_limits<int64_t>::max()};  // flat src index
  ParallelForBulk(rows, cols * static_cast<int64_t>(element), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const uint8_t* in = base + ((row0 + i) * width + col0) * element;
      uint16_t* out = dst + i * dst_stride;
      if (dtype == DType::kBF16) {
        std::memcpy(out, in, cols * sizeof(uint16_t));
      } else if (dtype == DType::kF16) {
        for (int64_t j = 0; j < cols; ++j) {
          uint16_t h;
          std::memcpy(&h, in + j * 2, 2);
          out[j] = FloatToBf16(F16ToFloat(h));
        }
      } else {
        for (int64_t j = 0; j < cols; ++j) {
          float f;
          std::memcpy(&f, in + j * 4, 4);
          out[j] = FloatToBf16(f);
        }
      }
      const int64_t j = FirstNonFiniteBf16(out, cols);  // ±Inf or NaN: exponent all ones
      if (j < 0) continue;
      const int64_t index = (row0 + i) * width + col0 + j;
      int64_t seen = first_bad.load();
      while (index < seen && !first_bad.compare_exchange_weak(seen, index)) {
      }
    }
  });
  const int64_t bad = first_bad.load();
  if (bad == std::numeric_limits<int64_t>::max()) return absl::OkStatus();
  const uint8_t* at = base + bad * element;
  float value;
  if (dtype == DType::kF32) {
    std::memcpy(&value, at, 4);
  } else {
    uint16_t h;
    std::memcpy(&h, at, 2);
    value = dtype == DType::kF16 ? F16ToFloat(h) : Bf16ToFloat(h);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "holds a value that is not finite in bf16 (", value, ") at [", bad / width, ", ",
      bad % width, "]; a NaN or Inf weight would make every logit non-finite"));
}

Bf16Tensor::Bf16Tensor(Shape shape)
    : shape_(std::move(shape)), data_(static_cast<size_t>(NumElements(shape_))) {}

Tensor::Tensor(Shape shape, const std::vector<float>& data)
    : shape_(std::move(shape)), data_(data.begin(), data.end()) {
  TPSERVE_CHECK(static_cast<int64_t>(data_.size()) == NumElements(shape_));
}

void Tensor::Resize(Shape shape) {
  const size_t n = static_cast<size_t>(NumElements(shape));
  if (n > data_.capacity()) {
    *this = Tensor(std::move(shape));  // fresh storage: the old elements are not copied
    return;
  }
  data_.resize(n);
  shape_ = std::move(shape);
}

absl::Status Tensor::Reshape(Shape shape) {
  if (NumElements(shape) != numel()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot reshape ", ShapeToString(shape_), " to ", ShapeToString(shape)));
  }
  shape_ = std::move(shape);
  return absl::OkStatus();
}

absl::Status CheckShape(const Tensor& t, const Shape& expected, const char* what) {
  if (t.shape() == expected) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, ": expected shape ", ShapeToString(expected),
                                                 ", got ", ShapeToString(t.shape())));
}

}  // namespace tpserve
