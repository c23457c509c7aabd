// The masked vocab-parallel embedding lookup on the GPU against a plain reference, in
// both dtypes: ids inside and outside this rank's slice (negative, just before, just
// past, far past), guard regions around the output, and the property the all-reduce
// relies on: the ranks' outputs sum to the full lookup.
// Tagged "gpu"; skips when no CUDA device is present.
#include "worker/kernels/cuda/embedding.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/cuda/cuda_test_util.h"

namespace tpserve {
namespace {

// Row i = weight[ids[i] − start] inside [start, start + rows), zeros outside.
std::vector<float> Lookup(const std::vector<int32_t>& ids, const std::vector<float>& weight,
                          int64_t start, int64_t rows, int64_t dim) {
  std::vector<float> out(ids.size() * dim, 0.0f);
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t local = int64_t{ids[i]} - start;
    if (local < 0 || local >= rows) continue;
    for (int64_t c = 0; c < dim; ++c) out[i * dim + c] = weight[local * dim + c];
  }
  return out;
}

// Random ids of [0, vocab) plus the edges of the slice and ids no rank holds.
std::vector<int32_t> Ids(int64_t count, int32_t vocab, int32_t start, int32_t rows, uint32_t seed) {
  std::vector<int32_t> ids = {start,
                              start + rows - 1,
                              start - 1,
                              start + rows,
                              -1,
                              vocab,
                              -1000000,
                              std::numeric_limits<int32_t>::min(),
                              std::numeric_limits<int32_t>::max()};
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> pick(0, vocab - 1);
  while (static_cast<int64_t>(ids.size()) < count) ids.push_back(pick(rng));
  std::shuffle(ids.begin(), ids.end(), rng);
  return ids;
}

// The outputs of `tp` ranks, each holding rows [r·rows, (r + 1)·rows) of a padded vocab.
template <typename T>
std::vector<std::vector<float>> RankOutputs(const std::vector<int32_t>& ids,
                                            const std::vector<float>& table, int tp, int64_t rows,
                                            int64_t dim) {
  const auto d_ids = DeviceArray<int32_t>::FromRaw(ids);
  std::vector<std::vector<float>> outs;
  for (int r = 0; r < tp; ++r) {
    const std::vector<float> slice(table.begin() + r * rows * dim,
                                   table.begin() + (r + 1) * rows * dim);
    const DeviceArray<T> d_weight(slice);
    GuardedOutput<T> out(ids.size() * dim);
    EXPECT_EQ(LaunchEmbedding(d_ids.get(), static_cast<int64_t>(ids.size()), d_weight.get(),
                              r * rows, rows, dim, out.get(), nullptr),
              cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    outs.push_back(out.ToHostCheckingGuards());
    // Rows are copied, not computed: exact.
    EXPECT_EQ(outs.back(), Lookup(ids, slice, r * rows, rows, dim))
        << "rank " << r << " of " << tp << ", dim " << dim;
  }
  return outs;
}

template <typename T>
class EmbeddingCudaTest : public ::testing::Test {};
using KernelTypes = ::testing::Types<float, __nv_bfloat16>;
TYPED_TEST_SUITE(EmbeddingCudaTest, KernelTypes);

TYPED_TEST(EmbeddingCudaTest, RanksCopyTheirRowsAndSumToTheFullLookup) {
  using T = TypeParam;
  TPSERVE_SKIP_WITHOUT_CUDA();
  struct Case {
    int32_t vocab;
    int tp;
    int64_t dim, n;
  };
  // Vector and scalar paths (dim % (16 / sizeof(T))), a padded last slice (1001 rows over
  // 4 ranks), one row per rank, and a wide row.
  const Case cases[] = {{1000, 1, 1, 9},   {1001, 4, 4, 40},  {1000, 2, 8, 333},
                        {1000, 8, 16, 64}, {1000, 4, 48, 17}, {1003, 3, 129, 50},
                        {8, 8, 16, 20},    {512, 2, 4096, 33}};
  uint32_t seed = 1;
  for (const Case& c : cases) {
    const int64_t rows = (c.vocab + c.tp - 1) / c.tp;  // the last slice is padded
    const auto table = RoundTo<T>(RandomVector(c.tp * rows * c.dim, seed++));
    for (int r = 0; r < c.tp; ++r) {
      // Each rank's slice edges, and ids from the whole vocab.
      const auto ids =
          Ids(c.n, c.vocab, static_cast<int32_t>(r * rows), static_cast<int32_t>(rows), seed++);
      const auto outs = RankOutputs<T>(ids, table, c.tp, rows, c.dim);
      std::vector<float> sum(ids.size() * c.dim, 0.0f);
      for (const auto& out : outs) {
        for (size_t i = 0; i < sum.size(); ++i) sum[i] += out[i];
      }
      EXPECT_EQ(sum, Lookup(ids, table, 0, c.tp * rows, c.dim))
          << "tp " << c.tp << ", dim " << c.dim;
    }
  }
}

// Size checks happen before any CUDA call, so this runs without a device too.
TEST(EmbeddingLaunchTest, RejectsNegativeSizesAndLaunchesNothingWhenEmpty) {
  const int32_t* ids = nullptr;
  float* none = nullptr;
  EXPECT_EQ(LaunchEmbedding<float>(ids, -1, none, 0, 10, 8, none, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(LaunchEmbedding<float>(ids, 2, none, 0, -1, 8, none, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(LaunchEmbedding<float>(ids, 2, none, -5, 10, 8, none, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(LaunchEmbedding<float>(ids, 2, none, 0, 10, -8, none, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(LaunchEmbedding<float>(ids, 0, none, 0, 10, 8, none, nullptr), cudaSuccess);
  EXPECT_EQ(LaunchEmbedding<float>(ids, 2, none, 0, 10, 0, none, nullptr), cudaSuccess);
}

}  // namespace
}  // namespace tpserve
