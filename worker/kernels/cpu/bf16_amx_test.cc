// bf16_amx's and bf16_avx512's kernels, each through MatMulBf16: under Bf16Kernel::kOwn
// the one this CPU packs its own layout for (the tile kernel with AMX, vdpbf16ps on
// 48-output blocks without), and under kAvx512Bf16 vdpbf16ps on oneDNN's blocks (forced
// on an AMX CPU).
#include "worker/kernels/cpu/bf16_amx.h"

#include <immintrin.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "worker/dtype.h"
#include "worker/kernels/cpu/bf16_avx512.h"
#include "worker/kernels/cpu/bf16_gemm.h"
#include "worker/kernels/cpu/bf16_gemm_testing.h"

namespace tpserve {
namespace {

__attribute__((target("amx-tile"))) void StoreTileConfig(uint8_t* out) {
  _tile_storeconfig(out);
}

// The parameter: Bf16Kernel::kOwn (the tile kernel on an AMX CPU, else vdpbf16ps on its
// own 48-output blocks), kAvx512Bf16 (vdpbf16ps on oneDNN's blocks).
class Bf16KernelTest : public ::testing::TestWithParam<Bf16Kernel> {
 protected:
  void SetUp() override {
    if (!bf16_avx512::Available()) GTEST_SKIP() << "no AVX512-BF16 on this CPU";
    SetBf16Kernel(GetParam());
  }
  void TearDown() override {
    SetBf16Kernel(Bf16Kernel::kOwn);
    SetBf16GemmThreads(0);
  }
  // Whether `w` runs on this test's kernel.
  bool OnKernel(const PackedBf16Weight& w) const {
    return GetParam() == Bf16Kernel::kOwn && bf16_amx::Available() ? w.runs_on_amx()
                                                                   : w.runs_on_avx512_bf16();
  }
};

// Under kOwn a weight is packed in its kernel's own layout, which only that kernel reads;
// under kAvx512Bf16 in oneDNN's, which the tile kernel reads too.
TEST_P(Bf16KernelTest, RunsOnTheLayoutItPacked) {
  PackedBf16Weight w = RandomWeight(100, 70, 1, nullptr);
  EXPECT_EQ(w.packed_for_onednn(), GetParam() != Bf16Kernel::kOwn);
  EXPECT_TRUE(OnKernel(w));
  EXPECT_NE(w.runs_on_amx(), w.runs_on_avx512_bf16());
  SetBf16Kernel(Bf16Kernel::kOneDnn);
  EXPECT_EQ(OnKernel(w), GetParam() == Bf16Kernel::kOwn);  // its own layout: still
  EXPECT_EQ(w.runs_on_amx() || w.runs_on_avx512_bf16(), GetParam() == Bf16Kernel::kOwn);
  PackedBf16Weight onednn = RandomWeight(100, 70, 1, nullptr);  // packed under kOneDnn
  EXPECT_TRUE(onednn.packed_for_onednn());
  EXPECT_FALSE(onednn.runs_on_amx());
  EXPECT_FALSE(onednn.runs_on_avx512_bf16());
  SetBf16Kernel(GetParam());
  EXPECT_TRUE(OnKernel(onednn));
}

// Shapes with tails in every dimension: k not a multiple of 32, n_out not of 64, m below,
// at and past the 16-row tile; blocks of 64 outputs and of 48 (oneDNN's choice for 65 x 33
// and 96 x 200); and k past the tile kernel's 64-step chunk (70 x 4200: three chunks of 44
// steps, the last with the tail), where from 17 rows its sums are parked between chunks.
TEST_P(Bf16KernelTest, OddShapesMatchReference) {
  for (auto [n_out, k] : {std::pair<int64_t, int64_t>{1, 1}, {3, 5}, {65, 1}, {100, 31},
                          {65, 33}, {96, 200}, {130, 100}, {517, 1031}, {70, 4200}}) {
    std::vector<float> w_rounded;
    PackedBf16Weight w = RandomWeight(n_out, k, 31, &w_rounded);
    ASSERT_TRUE(OnKernel(w)) << n_out << " x " << k;
    for (int64_t m : {1, 15, 16, 17, 33, 200}) {
      for (bool accumulate : {false, true}) {
        ExpectMatchesReference(w, w_rounded, m, accumulate, 32, /*max_checked_rows=*/20);
      }
    }
  }
}

// A row of y is the same bit for bit at every row count, at every position, on 1 or 2
// threads: one request's logits do not depend on the batch it was scheduled with (k = 2816
// is past the tile kernel's 64-step chunk: its sums are parked between two chunks from 17
// rows on, and not at 16 or fewer). (oneDNN's
// own matmul on the same weight changes a row's low bits with the row count; the check
// against it below shows this test would see that.)
TEST_P(Bf16KernelTest, RowsDoNotDependOnTheRestOfTheBatch) {
  const int64_t n_out = 1024, k = 2816, rows = 70;  // oneDNN varies at this size
  PackedBf16Weight w = RandomWeight(n_out, k, 41, nullptr);
  const std::vector<float> x = RandomNormal(rows * k, 42);  // [70, k]
  std::vector<float> batch(rows * n_out);
  ASSERT_TRUE(MatMulBf16(x.data(), rows, w, batch.data()).ok());
  for (int threads : {1, 2}) {
    SetBf16GemmThreads(threads);
    for (int64_t m : {1, 2, 7, 8, 16, 17, 32, 48, 64, 70}) {
      for (int64_t first : {int64_t{0}, rows - m}) {
        std::vector<float> part(m * n_out);
        ASSERT_TRUE(MatMulBf16(x.data() + first * k, m, w, part.data()).ok());
        ASSERT_EQ(std::memcmp(part.data(), batch.data() + first * n_out, part.size() * 4), 0)
            << "m " << m << " from row " << first << ", " << threads << " thread(s)";
      }
    }
  }
  // The same check on oneDNN's matmul (on the same values packed for it) finds a
  // difference for some row count on an AMX CPU (its AMX kernels), showing the check can
  // fail; its AVX512-BF16 kernels (seen on Zen 4) keep a row's bits at every row count,
  // so without AMX a sameness is only reported.
  SetBf16Kernel(Bf16Kernel::kOneDnn);
  SetBf16GemmThreads(1);
  PackedBf16Weight onednn_w = RandomWeight(n_out, k, 41, nullptr);
  ASSERT_TRUE(onednn_w.packed_for_onednn());
  std::vector<float> onednn_alone(n_out);
  ASSERT_TRUE(MatMulBf16(x.data(), 1, onednn_w, onednn_alone.data()).ok());
  int differing = 0;
  for (int64_t m : {2, 8, 16, 32, 64}) {
    std::vector<float> onednn_batch(m * n_out);
    ASSERT_TRUE(MatMulBf16(x.data(), m, onednn_w, onednn_batch.data()).ok());
    differing += std::memcmp(onednn_alone.data(), onednn_batch.data(), n_out * 4) != 0;
  }
  if (!bf16_amx::Available() && differing == 0) {
    std::printf("oneDNN's matmul gave row 0 the same bits at every row count on this CPU\n");
    return;
  }
  EXPECT_GT(differing, 0) << "oneDNN's matmul gave row 0 the same bits at every row count";
}

// Past 256 rows at k = 2,048 (1 MiB of x) the tile kernel takes the rows in chunks, each
// passing over every output block: 1,040 rows (65 groups) are three chunks of 17 groups
// and one of 14.
// A row's bits are those it gets in a call of 20 rows (one chunk), wherever it sits, on 1
// or 2 threads, and the products match the reference, y's edges untouched.
TEST_P(Bf16KernelTest, RowChunksGiveTheSameBits) {
  const int64_t n_out = 100, k = 2048, rows = 1040;
  std::vector<float> w_rounded;
  PackedBf16Weight w = RandomWeight(n_out, k, 51, &w_rounded);
  const std::vector<float> x = RandomNormal(rows * k, 52);  // [1040, k]
  for (int threads : {1, 2}) {
    SetBf16GemmThreads(threads);
    std::vector<float> batch(rows * n_out);
    ASSERT_TRUE(MatMulBf16(x.data(), rows, w, batch.data()).ok());
    for (int64_t first : {int64_t{0}, int64_t{17 * 16 - 3}, int64_t{3 * 17 * 16}, rows - 20}) {
      std::vector<float> part(20 * n_out);
      ASSERT_TRUE(MatMulBf16(x.data() + first * k, 20, w, part.data()).ok());
      ASSERT_EQ(std::memcmp(part.data(), batch.data() + first * n_out, part.size() * 4), 0)
          << "rows from " << first << ", " << threads << " thread(s)";
    }
    for (bool accumulate : {false, true}) {
      ExpectMatchesReference(w, w_rounded, rows, accumulate, 53, /*max_checked_rows=*/6);
    }
  }
}

TEST_P(Bf16KernelTest, NonFiniteXStaysInItsRow) {
  PackedBf16Weight w = RandomWeight(70, 40, 61, nullptr);
  std::vector<float> x = RandomNormal(20 * 40, 62);  // [20, 40]
  x[3 * 40 + 7] = std::numeric_limits<float>::quiet_NaN();
  x[17 * 40] = std::numeric_limits<float>::infinity();
  std::vector<float> y(20 * 70);
  ASSERT_TRUE(MatMulBf16(x.data(), 20, w, y.data()).ok());
  for (int64_t i = 0; i < 20; ++i) {
    for (int64_t j = 0; j < 70; ++j) {
      const bool poisoned = i == 3 || i == 17;
      EXPECT_EQ(std::isfinite(y[i * 70 + j]), !poisoned) << i << ", " << j;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, Bf16KernelTest,
                         ::testing::Values(Bf16Kernel::kOwn, Bf16Kernel::kAvx512Bf16),
                         [](const ::testing::TestParamInfo<Bf16Kernel>& info) {
                           return info.param == Bf16Kernel::kOwn ? "OwnLayout" : "OneDnnLayout";
                         });

// ConfigureTiles gives every tile the kernels use 16 rows of 64 bytes, as STTILECFG reads
// the configuration back (an optimiser that drops the configuration's stores leaves them 0).
TEST(Bf16AmxTilesTest, ConfigureTilesSetsEveryTile) {
  if (!bf16_amx::Available()) GTEST_SKIP() << "no AMX-BF16 on this CPU (or the OS refused it)";
  bf16_amx::ConfigureTiles();
  alignas(64) uint8_t config[64];
  std::memset(config, 0xee, sizeof(config));
  StoreTileConfig(config);
  bf16_amx::ReleaseTiles();
  EXPECT_EQ(config[0], 1) << "palette";
  for (int t = 0; t < 8; ++t) {
    uint16_t colsb;
    std::memcpy(&colsb, config + 16 + 2 * t, sizeof(colsb));
    EXPECT_EQ(colsb, 64) << "tile " << t;
    EXPECT_EQ(config[48 + t], 16) << "tile " << t;
  }
}

// `w` ([n_out, k] bf16 bits) in bf16_amx.h's layout with blocks of `block_outputs`,
// written out from the layout's definition (not by oneDNN's reorder).
std::vector<uint16_t> PackBlocks(const std::vector<uint16_t>& w, int64_t n_out, int64_t k,
                                 int64_t block_outputs, bf16_amx::Layout* layout) {
  const int64_t b = block_outputs, cols = bf16_amx::PaddedCols(k);
  *layout = bf16_amx::Layout{b, 32 * b, cols * b};
  std::vector<uint16_t> packed(bf16_amx::NumBlocks(n_out, *layout) * cols * b, 0);
  for (int64_t n = 0; n < n_out; ++n) {
    for (int64_t c = 0; c < k; ++c) {  // block (c / 32, n / b): [16 column pairs][b][2]
      packed[c / 32 * layout->k_block_stride + n / b * layout->n_block_stride +
             c % 32 / 2 * b * 2 + n % b * 2 + c % 2] = w[n * k + c];
    }
  }
  return packed;
}

// Every block width the layout allows, PackTiles' tile-by-tile blocks and
// bf16_avx512::PackBlocks' (the layout written out below, byte for byte), give every row
// of y the same bits, on both kernels (whichever this CPU runs), accumulating or not, at
// row counts below, at and past the 16-row tile: oneDNN packs 64 or 48 outputs a block by
// the weight's shape, so the other widths' code paths are reached here only.
TEST(Bf16AmxLayoutTest, EveryBlockWidthGivesTheSameBits) {
  if (!bf16_avx512::Available()) GTEST_SKIP() << "no AVX512-BF16 on this CPU";
  const int64_t n_out = 200, k = 300;  // tails: 200 = 3·64 + 8, 300 = 9·32 + 12
  const std::vector<float> w_values = RandomNormal(n_out * k, 81);
  std::vector<uint16_t> w(n_out * k);
  for (int64_t i = 0; i < n_out * k; ++i) w[i] = FloatToBf16(w_values[i]);
  using Fn = void (*)(const uint16_t*, int64_t, int64_t, const uint16_t*, bf16_amx::Layout,
                      int64_t, int64_t, int64_t, float*, bool);
  std::vector<std::pair<const char*, Fn>> kernels = {{"vdpbf16ps", &bf16_avx512::MatMulBlocks}};
  if (bf16_amx::Available()) kernels.push_back({"amx", &bf16_amx::MatMulBlocks});
  for (int64_t m : {1, 15, 16, 17, 32, 33, 48, 70}) {
    const std::vector<float> x = RandomNormal(m * k, 82);
    const std::vector<float> y0 = RandomNormal(m * n_out, 83);
    std::vector<uint16_t> xb(bf16_amx::PaddedRows(m) * bf16_amx::PaddedCols(k));
    bf16_amx::PrepareX(x.data(), m, k, xb.data());
    for (const auto& [name, fn] : kernels) {
      for (bool accumulate : {false, true}) {
        std::vector<float> want;
        for (int64_t block_outputs : {32, 16, 48, 64, /*PackTiles*/ 0, /*PackBlocks*/ -1}) {
          bf16_amx::Layout layout;
          std::vector<uint16_t> packed;
          if (block_outputs > 0) {
            packed = PackBlocks(w, n_out, k, block_outputs, &layout);
          } else if (block_outputs < 0) {
            layout = bf16_avx512::BlocksLayout(k);
            packed.resize(bf16_avx512::BlocksElements(n_out, k));
            const int64_t blocks = bf16_amx::NumBlocks(n_out, layout);  // in two calls
            bf16_avx512::PackBlocks(w.data(), n_out, k, packed.data(), 0, blocks / 2);
            bf16_avx512::PackBlocks(w.data(), n_out, k, packed.data(), blocks / 2, blocks);
            bf16_amx::Layout reference;
            ASSERT_EQ(packed, PackBlocks(w, n_out, k, 48, &reference));
            ASSERT_EQ(layout.n_block_stride, reference.n_block_stride);
          } else {
            layout = bf16_amx::TilesLayout(k);
            packed.resize(bf16_amx::TilesElements(n_out, k));
            const int64_t blocks = bf16_amx::NumBlocks(n_out, layout);  // in two calls
            bf16_amx::PackTiles(w.data(), n_out, k, packed.data(), 0, blocks / 2);
            bf16_amx::PackTiles(w.data(), n_out, k, packed.data(), blocks / 2, blocks);
          }
          std::vector<float> y = y0;
          fn(xb.data(), m, k, packed.data(), layout, n_out, 0,
             bf16_amx::NumBlocks(n_out, layout), y.data(), accumulate);
          if (want.empty()) {
            want = y;
            continue;
          }
          ASSERT_EQ(std::memcmp(y.data(), want.data(), y.size() * sizeof(float)), 0)
              << name << ": "
              << (block_outputs > 0 ? "" : block_outputs == 0 ? "PackTiles' " : "PackBlocks' ")
              << layout.block_outputs
              << " outputs a block against 32, m " << m
              << (accumulate ? ", accumulating" : "");
        }
      }
    }
  }
}

// The vdpbf16ps kernel's pass orders (bf16_avx512::Passes: whole passes, or chunks of
// k with each pass's sums parked between them; with or without ask_ahead's prefetches)
// give every row of y the same bits, at row counts of one to eight passes, with k in
// chunks that end short (k = 1,031: 33 k blocks) and chunks of one k block, over a range
// of output blocks that starts and ends inside the weight (as a thread's run does),
// accumulating or not; y outside the range stays.
TEST(Bf16Avx512PassesTest, EveryPassOrderGivesTheSameBits) {
  if (!bf16_avx512::Available()) GTEST_SKIP() << "no AVX512-BF16 on this CPU";
  const int64_t n_out = 300, k = 1031;  // 5 blocks of 64 outputs (the last of 44), 7 of 48
  const std::vector<float> w_values = RandomNormal(n_out * k, 91);
  std::vector<uint16_t> w(n_out * k);
  for (int64_t i = 0; i < n_out * k; ++i) w[i] = FloatToBf16(w_values[i]);
  const std::vector<bf16_avx512::Passes> plans = {
      {0, 8},           {16, 3},          {1, 8, false, 1}, {4, 2, false, 1},
      {5, 8, false, 1}, {64, 8, false, 1}, {0, 8, true},     {16, 3, true, 1}};
  // oneDNN's 64-output blocks (6 rows a pass) and the kernel's own 48 (8 rows a pass).
  for (int64_t b : {64, 48}) {
    bf16_amx::Layout layout;
    const std::vector<uint16_t> packed = PackBlocks(w, n_out, k, b, &layout);
    for (int64_t m : {1, 6, 7, 8, 9, 12, 13, 16, 17, 18, 19, 24, 25, 31, 48}) {
      const std::vector<float> x = RandomNormal(m * k, 92);
      const std::vector<float> y0 = RandomNormal(m * n_out, 93);
      std::vector<uint16_t> xb(bf16_amx::PaddedRows(m) * bf16_amx::PaddedCols(k));
      bf16_amx::PrepareX(x.data(), m, k, xb.data());
      for (bool accumulate : {false, true}) {
        std::vector<float> want;
        for (const bf16_avx512::Passes& plan : plans) {
          std::vector<float> y = y0;
          bf16_avx512::MatMulBlocksIn(plan, xb.data(), m, k, packed.data(), layout, n_out, 1,
                                      4, y.data(), accumulate);
          for (int64_t r = 0; r < m; ++r) {  // outputs of block 0 and from block 4 untouched
            for (int64_t n : {int64_t{0}, b - 1, 4 * b, n_out - 1}) {
              ASSERT_EQ(y[r * n_out + n], y0[r * n_out + n]) << "row " << r << ", " << n;
            }
          }
          if (want.empty()) {
            want = y;
            continue;
          }
          ASSERT_EQ(std::memcmp(y.data(), want.data(), y.size() * sizeof(float)), 0)
              << b << "-output blocks, chunks of " << plan.chunk_blocks << " up to "
              << plan.max_chunked_passes << " passes" << (plan.ask_ahead ? " asking ahead" : "")
              << " against whole passes, m " << m << (accumulate ? ", accumulating" : "");
        }
      }
    }
  }
}

TEST(Bf16AmxPrepareTest, PadsWithZerosAndRoundsToNearestEven) {
  if (!__builtin_cpu_supports("avx512bf16")) GTEST_SKIP() << "no AVX512-BF16";
  const int64_t m = 3, k = 37;
  std::vector<float> x = RandomNormal(m * k, 71);
  x[1] = 1.0f + 0x1p-8f;         // a tie: rounds to 1.0 (even)
  x[2] = 1.0f + 3 * 0x1p-8f;     // a tie: rounds up to 1 + 2^-6
  const int64_t rows = bf16_amx::PaddedRows(m), cols = bf16_amx::PaddedCols(k);
  ASSERT_EQ(rows, 16);
  ASSERT_EQ(cols, 64);
  std::vector<uint16_t> out(rows * cols, 0xffff);
  bf16_amx::PrepareX(x.data(), m, k, out.data());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const uint16_t want = r < m && c < k ? FloatToBf16(x[r * k + c]) : 0;
      ASSERT_EQ(out[r * cols + c], want) << r << ", " << c;
    }
  }
  EXPECT_EQ(out[1], 0x3f80);
  EXPECT_EQ(out[2], 0x3f82);
}

}  // namespace
}  // namespace tpserve
