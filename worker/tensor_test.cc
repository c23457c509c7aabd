#include "worker/tensor.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

TEST(TensorTest, NewTensorsAreZeroFilledLargeOnesToo) {
  for (const Shape& shape : {Shape{3, 5}, Shape{}, Shape{0, 4}, Shape{1024, 1536}}) {
    const Tensor t(shape);  // the last is 6 MiB: whole huge pages are advised
    EXPECT_EQ(t.shape(), shape);
    EXPECT_EQ(t.numel(), NumElements(shape));
    int64_t nonzero = 0;
    for (float v : t.span()) nonzero += v != 0.0f;
    EXPECT_EQ(nonzero, 0) << ShapeToString(shape);
  }
}

// Every tensor's storage starts on a 64-byte boundary (malloc and calloc put large blocks
// 16 bytes past one): small and large, zeroed and not, fresh and recycled.
TEST(TensorTest, StorageStartsOnA64ByteBoundary) {
  TrimTensorStorage();
  for (int round = 0; round < 2; ++round) {  // the second round takes kept blocks
    for (const Shape& shape : {Shape{1}, Shape{3, 5}, Shape{1, 2048}, Shape{32, 2048},
                               Shape{300, 1030}, Shape{512, 1024}, Shape{1024, 1536}}) {
      for (bool zeroed : {true, false}) {
        Tensor t = zeroed ? Tensor(shape) : Tensor::Uninitialized(shape);
        EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 64, 0u)
            << ShapeToString(shape) << (zeroed ? " zeroed" : " uninitialized") << ", round "
            << round;
        if (zeroed) { EXPECT_EQ(t.data()[t.numel() - 1], 0.0f); }
        for (float& v : t.span()) v = 1.0f;  // the whole block is writable
      }
    }
  }
}

// Large tensors' storage is kept when they go and handed to the next tensor it holds
// (up to twice its size), zeroed again; a fresh request lets kept blocks go, the largest
// first, only as far as the slack needs; small tensors' storage is not kept; nor is
// anything past the cap.
TEST(TensorTest, LargeStorageIsRecycledZeroed) {
  TrimTensorStorage();
  EXPECT_EQ(RecycledTensorStorage().blocks, 0u);
  EXPECT_EQ(RecycledTensorStorage().bytes, 0u);
  const float* first = nullptr;
  {
    Tensor t({512, 1024});  // 2 MiB
    for (float& v : t.span()) v = 7.0f;
    first = t.data();
  }
  const RecycledStorage kept = RecycledTensorStorage();
  EXPECT_GE(kept.blocks, 1u);
  EXPECT_GE(kept.bytes, size_t{2} << 20);
  {
    Tensor again({300, 1030});  // 1.2 MiB: the kept 2 MiB block holds it
    EXPECT_EQ(again.data(), first);
    int64_t nonzero = 0;
    for (float v : again.span()) nonzero += v != 0.0f;
    EXPECT_EQ(nonzero, 0);
    EXPECT_EQ(RecycledTensorStorage().blocks, kept.blocks - 1);
    for (float& v : again.span()) v = 3.0f;
  }
  {
    // 4 MiB: nothing kept holds it, so it is fresh; the kept 2 MiB block stays, since
    // live + kept (6 MiB) is within the slack above the live peak (4 MiB).
    Tensor larger({1024, 1024});
    EXPECT_EQ(RecycledTensorStorage().blocks, 1u);
    const Tensor two({512, 1024});  // the kept 2 MiB block
    EXPECT_EQ(two.data(), first);
    EXPECT_EQ(RecycledTensorStorage().blocks, 0u);
  }
  EXPECT_EQ(RecycledTensorStorage().blocks, 2u);
  {
    const Tensor tiny({300, 1024});  // 1.2 MiB: the smallest kept block that holds it
    const Tensor two({512, 1024});   // 2 MiB: the 4 MiB one, at most twice as large
    EXPECT_EQ(RecycledTensorStorage().blocks, 0u);
  }
  EXPECT_EQ(RecycledTensorStorage().bytes, size_t{6} << 20);
  {
    // 9 MiB, fresh: live (9) + kept (6) would be past 1.5 x the live peak (9), so kept
    // blocks go, the largest (4 MiB) first, until it is not.
    const Tensor nine({2304, 1024});
    EXPECT_EQ(RecycledTensorStorage().blocks, 1u);
    EXPECT_EQ(RecycledTensorStorage().bytes, size_t{2} << 20);
  }
  {
    std::vector<Tensor> many;
    for (size_t i = 0; i < kRecycleMaxBytes / (size_t{16} << 20) + 2; ++i) {
      many.emplace_back(Shape{4096, 1024});  // 16 MiB each
    }
  }
  EXPECT_LE(RecycledTensorStorage().bytes, kRecycleMaxBytes);
  const size_t blocks = RecycledTensorStorage().blocks;
  { Tensor small({16, 16}); }
  EXPECT_EQ(RecycledTensorStorage().blocks, blocks);
}

// Tensor::Uninitialized takes a kept block as it is (no clearing pass), small or fresh
// storage is still whatever the allocator gives, and the tensor's later growth and copies
// are zeroed again.
TEST(TensorTest, UninitializedTakesRecycledStorageUncleared) {
  TrimTensorStorage();
  const float* first = nullptr;
  {
    Tensor t({512, 1024});  // 2 MiB
    for (float& v : t.span()) v = 7.0f;
    first = t.data();
  }
  {
    Tensor out = Tensor::Uninitialized({300, 1030});  // 1.2 MiB: the kept block, as left
    EXPECT_EQ(out.shape(), (Shape{300, 1030}));
    EXPECT_EQ(out.numel(), 300 * 1030);
    ASSERT_EQ(out.data(), first);
    int64_t sevens = 0;
    for (float v : out.span()) sevens += v == 7.0f;
    EXPECT_EQ(sevens, out.numel());
    const Tensor copy = out;  // a copy has its own storage, copied
    EXPECT_EQ(copy.data()[0], 7.0f);
    out.Resize({2048, 1024});  // growth: fresh storage, zero-filled as Resize promises
    EXPECT_EQ(out.data()[out.numel() - 1], 0.0f);
  }
  {
    const Tensor zeroed({300, 1030});  // the zeroing constructor still clears a kept block
    int64_t nonzero = 0;
    for (float v : zeroed.span()) nonzero += v != 0.0f;
    EXPECT_EQ(nonzero, 0);
  }
  const Tensor small = Tensor::Uninitialized({3, 5});
  EXPECT_EQ(small.numel(), 15);
  const Tensor empty = Tensor::Uninitialized({0, 4});
  EXPECT_TRUE(empty.empty());
}

// A decoder layer's activations, in MiB, live at different times: a 10 MiB tensor that
// the kept 22 and 44 MiB blocks are too large for (more than twice) among them. After
// the first layer every request finds a kept block; what is live and kept stays within
// the slack above the most ever live at once. (Freeing every kept block on a miss, as
// before, took fresh memory five times a layer here, page faults and kernel clearing
// each time.)
TEST(TensorTest, LayerAfterLayerFindsKeptBlocks) {
  TrimTensorStorage();
  auto mib = [](int64_t n) { return Shape{n, 262144}; };  // n MiB of floats
  int64_t peak_live = 0, peak_footprint = 0;
  auto note = [&](int64_t live_mib) {
    peak_live = std::max(peak_live, live_mib << 20);
    peak_footprint = std::max(
        peak_footprint, (live_mib << 20) + static_cast<int64_t>(RecycledTensorStorage().bytes));
  };
  auto layer = [&] {
    {
      Tensor q = Tensor::Uninitialized(mib(10));
      {
        Tensor k = Tensor::Uninitialized(mib(8));
        note(18);
      }
      Tensor o = Tensor::Uninitialized(mib(8));
      note(18);
    }
    Tensor act;
    {
      Tensor gate_up = Tensor::Uninitialized(mib(44));
      act = Tensor::Uninitialized(mib(22));
      note(66);
    }
    Tensor down(mib(8));
    note(30);
    for (float v : down.span()) ASSERT_EQ(v, 0.0f);  // zeroed, recycled or not
  };
  layer();
  const size_t fresh_after_first = RecycledTensorStorage().fresh_requests;
  for (int i = 0; i < 5; ++i) layer();
  EXPECT_EQ(RecycledTensorStorage().fresh_requests, fresh_after_first);
  EXPECT_LE(peak_footprint, peak_live + static_cast<int64_t>(peak_live * kRecycleSlack));
  TrimTensorStorage();
  EXPECT_EQ(RecycledTensorStorage().bytes, 0u);
}

TEST(TensorTest, ResizeReusesStorageThatIsLargeEnough) {
  Tensor t({1024, 1024});
  t.data()[0] = 1.0f;
  const float* storage = t.data();
  t.Resize({4, 8});
  EXPECT_EQ(t.shape(), (Shape{4, 8}));
  EXPECT_EQ(t.numel(), 32);
  EXPECT_EQ(t.data(), storage);
  t.Resize({512, 2048});  // as large as it started
  EXPECT_EQ(t.shape(), (Shape{512, 2048}));
  EXPECT_EQ(t.numel(), 512 * 2048);
  EXPECT_EQ(t.data(), storage);
  t.Resize({2048, 1024});  // larger: new storage, zero-filled
  EXPECT_EQ(t.shape(), (Shape{2048, 1024}));
  EXPECT_EQ(t.numel(), 2048 * 1024);
  EXPECT_EQ(t.data()[0], 0.0f);
  EXPECT_EQ(t.data()[t.numel() - 1], 0.0f);
}

TEST(TensorTest, ReshapeKeepsTheCount) {
  Tensor t({2, 6});
  EXPECT_TRUE(t.Reshape({3, 4}).ok());
  EXPECT_EQ(t.dim(-1), 4);
  const absl::Status s = t.Reshape({5});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "cannot reshape [3, 4] to [5]");
}

// /proc/self/status's RssFile (file-backed resident pages) in bytes, or -1.
int64_t RssFileBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("RssFile:", 0) == 0) return std::stoll(line.substr(8)) * 1024;
  }
  return -1;
}

// A file-mapped view's released rows leave the resident set and read back the same; a
// view of ordinary memory is left alone (MADV_DONTNEED would have zeroed it).
TEST(TensorTest, ReleaseMappedRowsDropsOnlyFileMappedPages) {
  const int64_t rows = 1024, cols = 4096;  // bf16: 8 MiB, 8 KiB a row
  std::vector<uint16_t> values(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<uint16_t>(i * 2654435761u);
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/mapped.bin";
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(values.data()), values.size() * 2);
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  const size_t bytes = values.size() * 2;
  void* map = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  ASSERT_NE(map, MAP_FAILED);
  const WeightView mapped{map, DType::kBF16, {rows, cols}, /*file_mapped=*/true};
  const auto* data = static_cast<const uint16_t*>(map);
  uint64_t sum = 0;
  for (size_t i = 0; i < values.size(); i += 1024) sum += data[i];  // every page resident
  const int64_t resident = RssFileBytes();
  ReleaseMappedRows(mapped, 0, rows / 2);
  ReleaseMappedRows(mapped, rows / 2, rows / 2);
  const int64_t released = resident - RssFileBytes();
  EXPECT_GE(released, static_cast<int64_t>(bytes) * 9 / 10) << "resident " << resident;
  EXPECT_TRUE(std::equal(values.begin(), values.end(), data));  // faulted back in
  ReleaseMappedRows(mapped, rows - 1, 2);  // past the end: nothing
  ReleaseMappedRows(mapped, -1, 1);
  ::munmap(map, bytes);
  EXPECT_GT(sum, 0u);

  // Ordinary memory, page-aligned so that whole pages lie inside the rows.
  auto* heap = static_cast<uint16_t*>(std::aligned_alloc(1 << 21, bytes));
  std::copy(values.begin(), values.end(), heap);
  ReleaseMappedRows(WeightView{heap, DType::kBF16, {rows, cols}}, 0, rows);
  EXPECT_TRUE(std::equal(values.begin(), values.end(), heap));
  std::free(heap);
}

}  // namespace
}  // namespace tpserve
