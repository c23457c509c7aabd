// Tensor: a dense, row-major fp32 host tensor that owns its storage.
//
// The CPU backend computes everything in fp32, so this is the one activation and
// weight container of the CPU path. Not thread-safe; a Tensor is owned by one rank.
#ifndef TPSERVE_WORKER_TENSOR_H_
#define TPSERVE_WORKER_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "worker/dtype.h"

namespace tpserve {

using Shape = std::vector<int64_t>;

// Product of the dims; 1 for the empty shape.
int64_t NumElements(const Shape& shape);
// "[2, 3]"
std::string ShapeToString(const Shape& shape);

// Zeroed storage for `bytes` from calloc: fresh pages from the OS are zero already, so a
// large tensor is not written before its first real use, and it asks for transparent
// huge pages before that first touch (one fault per 2 MiB instead of per 4 KiB, which
// is most of what loading a model costs; advice only). Throws std::bad_alloc as new does.
// Freed with std::free. A large request (a packed weight, at load) first frees every
// tensor block kept for reuse (below).
void* AllocateZeroed(size_t bytes);

// Zeroed storage for a tensor (or, unless `zeroed`, storage whose contents are
// unspecified), on a 64-byte boundary, freed with ReleaseTensorStorage(p, bytes) and
// nothing else. A smaller block that need not be zeroed comes from malloc, uncleared. Blocks of
// at least kRecycleMinBytes are recycled: a released one is kept, up to
// kRecycleMaxBytes in all, and handed to a later request it holds (the smallest such, if
// at most twice the request), zeroed by memset if `zeroed` (an output the next call
// writes whole skips that pass: 5-7% of a prefill, docs/perf.md). A forward pass asks for
// the same activation sizes layer after layer, and a fresh block from the OS costs a
// page fault and a kernel clear per page instead (a tenth of a long prefill's time,
// docs/perf.md). A request no kept block fits takes fresh memory, and kept blocks go,
// the largest first, until what is live and kept is at most kRecycleSlack above the most
// ever live at once since the last trim: so after a forward pass's first layer, the next
// layers' requests all find a block (a layer's outputs are live at different times, so
// a set of blocks that serves every one of them is more than is live at any moment),
// while keeping adds at most half to the activations' own peak (tested by tensor_test
// and llama_bf16_load_test). Thread-safe.
void* AllocateTensorStorage(size_t bytes, bool zeroed = true);
void ReleaseTensorStorage(void* p, size_t bytes);
inline constexpr size_t kRecycleMinBytes = size_t{1} << 20;
inline constexpr size_t kRecycleMaxBytes = size_t{256} << 20;
inline constexpr double kRecycleSlack = 0.5;
// What the recycler keeps now: bytes and blocks; and, since the process began, how many
// recyclable requests took fresh memory (for tests and benchmarks).
struct RecycledStorage {
  size_t bytes = 0;
  size_t blocks = 0;
  size_t fresh_requests = 0;
};
RecycledStorage RecycledTensorStorage();
// Frees every kept block (after loading a model, say: its staging buffers' sizes are not
// the forward pass's), and starts the high-water mark of live bytes again from what is
// live now.
void TrimTensorStorage();

// The allocator of Tensor's storage: AllocateTensorStorage, zeroed (unless constructed
// with zeroed = false, Tensor::Uninitialized's), so value-initialising an element (what
// std::vector<T>(n) and resize(n) do) writes nothing. Every instance hands out the same
// kind of storage, so they compare equal; a copied container gets a zeroing one.
template <typename T>
struct ZeroedAllocator {
  using value_type = T;
  ZeroedAllocator() = default;
  explicit ZeroedAllocator(bool zeroed) : zeroed(zeroed) {}
  template <typename U>
  ZeroedAllocator(const ZeroedAllocator<U>& other) : zeroed(other.zeroed) {}  // NOLINT
  ZeroedAllocator select_on_container_copy_construction() const { return ZeroedAllocator(); }
  T* allocate(size_t n) {
    return static_cast<T*>(AllocateTensorStorage(n * sizeof(T), zeroed));
  }
  void deallocate(T* p, size_t n) { ReleaseTensorStorage(p, n * sizeof(T)); }
  template <typename U>
  void construct(U*) noexcept {}  // already zero (or, in Tensor::Resize, unspecified)
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
  template <typename U>
  bool operator==(const ZeroedAllocator<U>&) const { return true; }
  template <typename U>
  bool operator!=(const ZeroedAllocator<U>&) const { return false; }

  bool zeroed = true;
};

class Tensor {
 public:
  Tensor() = default;
  // Zero-filled tensor of `shape`.
  explicit Tensor(Shape shape);
  // A tensor of `shape` whose elements are unspecified (recycled storage is not cleared):
  // for an output the next call writes whole, a GEMM's, say.
  static Tensor Uninitialized(Shape shape);
  // Copies `data`; its size must equal NumElements(shape).
  Tensor(Shape shape, const std::vector<float>& data);

  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_[i < 0 ? i + shape_.size() : i]; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const { return static_cast<int64_t>(data_.size()); }
  bool empty() const { return data_.empty(); }

  float* data() { return data_.data(); }
  const float* data() const { return data_.data(); }
  absl::Span<float> span() { return absl::MakeSpan(data_); }
  absl::Span<const float> span() const { return absl::MakeConstSpan(data_); }

  // Row i of a tensor viewed as [dim(0), numel/dim(0)].
  float* row(int64_t i) { return data_.data() + i * (numel() / shape_[0]); }
  const float* row(int64_t i) const { return data_.data() + i * (numel() / shape_[0]); }

  // Changes the shape, keeping the elements; InvalidArgument if the count differs.
  absl::Status Reshape(Shape shape);
  // Takes `shape`, whatever its element count, reusing the storage when it is large
  // enough: for a scratch tensor that is overwritten next, so the elements are left
  // unspecified (zeros only where new storage was allocated).
  void Resize(Shape shape);

 private:
  Shape shape_;
  std::vector<float, ZeroedAllocator<float>> data_;
};

// A read-only view of a row-major weight as stored in a checkpoint (F32, BF16 or F16,
// possibly unaligned): what the CPU backend's bf16 mode loads from, converting only the
// slice a rank keeps, so that no fp32 copy of a weight ever exists.
struct WeightView {
  const void* data = nullptr;
  DType dtype = DType::kBF16;
  Shape shape;  // [rows, cols]
  // Set where data lies in a read-only file mapping (a checkpoint's), whose pages can
  // leave the resident set and fault back in from the page cache (ReleaseMappedRows).
  bool file_mapped = false;

  int rank() const { return static_cast<int>(shape.size()); }
  int64_t dim(int i) const { return shape[i]; }
};

// For a file-mapped view, drops the pages that lie wholly inside rows [row0, row0 + rows)
// from this process's resident set (madvise MADV_DONTNEED; advice only), so that a loader
// reading a large tensor a chunk at a time holds one chunk of the mapping, not the whole
// tensor. A later read of those rows faults them back in. Does nothing for other views
// (their memory would be lost) or for rows outside the view.
void ReleaseMappedRows(const WeightView& view, int64_t row0, int64_t rows);

// dst[i·dst_stride + j] = bf16(src[row0 + i, col0 + j]) for i < rows, j < cols: BF16
// copied, F32 and F16 rounded to nearest even. InvalidArgument if the block is outside
// src, or naming the index of the first value that is not finite in bf16 (a NaN or Inf
// weight, or an F32 beyond bf16's range) and why it matters.
absl::Status CopyToBf16(const WeightView& src, int64_t row0, int64_t rows, int64_t col0,
                        int64_t cols, uint16_t* dst, int64_t dst_stride);

// A dense row-major tensor of bf16 bits that owns its (zeroed, lazily faulted) storage.
class Bf16Tensor {
 public:
  Bf16Tensor() = default;
  explicit Bf16Tensor(Shape shape);

  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_[i]; }
  int64_t numel() const { return static_cast<int64_t>(data_.size()); }
  bool empty() const { return data_.empty(); }
  uint16_t* data() { return data_.data(); }
  const uint16_t* data() const { return data_.data(); }
  uint16_t* row(int64_t i) { return data_.data() + i * (numel() / shape_[0]); }
  const uint16_t* row(int64_t i) const { return data_.data() + i * (numel() / shape_[0]); }

 private:
  Shape shape_;
  std::vector<uint16_t, ZeroedAllocator<uint16_t>> data_;
};

// OK if `t` has exactly `expected` shape, else InvalidArgument naming `what`.
absl::Status CheckShape(const Tensor& t, const Shape& expected, const char* what);

}  // namespace tpserve

#endif  // TPSERVE_WORKER_TENSOR_H_
