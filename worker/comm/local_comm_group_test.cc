#include "worker/comm/local_comm_group.h"

#include <vector>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

TEST(LocalCommGroupTest, AllReduceSumsAcrossRanks) {
  for (int world : {1, 2, 3, 4}) {
    std::vector<std::vector<float>> results(world);
    RunOnLocalRanks(world, [&](int rank, CommGroup& comm) {
      std::vector<float> v = {float(rank), float(rank * 10), 1.0f};
      ASSERT_TRUE(comm.AllReduceSum(absl::MakeSpan(v)).ok());
      results[rank] = v;
    });
    const float s = world * (world - 1) / 2.0f;
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(results[r], (std::vector<float>{s, 10 * s, float(world)})) << world;
    }
  }
}

TEST(LocalCommGroupTest, AllGatherLastDimInterleavesColumns) {
  std::vector<Tensor> results(3);
  RunOnLocalRanks(3, [&](int rank, CommGroup& comm) {
    // [2, 2] local: row i = {10·i + 2·rank, 10·i + 2·rank + 1}
    Tensor local({2, 2}, {float(2 * rank), float(2 * rank + 1), float(10 + 2 * rank),
                          float(11 + 2 * rank)});
    auto out = AllGatherLastDim(comm, local);
    ASSERT_TRUE(out.ok());
    results[rank] = *out;
  });
  for (const Tensor& t : results) {
    EXPECT_EQ(t.shape(), (Shape{2, 6}));
    EXPECT_EQ(std::vector<float>(t.data(), t.data() + 12),
              (std::vector<float>{0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15}));
  }
}

TEST(LocalCommGroupTest, BroadcastCopiesRootBytes) {
  RunOnLocalRanks(4, [&](int rank, CommGroup& comm) {
    std::vector<uint8_t> bytes(5, static_cast<uint8_t>(rank));
    ASSERT_TRUE(comm.Broadcast(absl::MakeSpan(bytes), 2).ok());
    EXPECT_EQ(bytes, std::vector<uint8_t>(5, 2));
    EXPECT_TRUE(comm.Barrier().ok());
  });
}

TEST(LocalCommGroupTest, MismatchedAllReduceIsAnError) {
  RunOnLocalRanks(2, [&](int rank, CommGroup& comm) {
    std::vector<float> v(rank + 1, 1.0f);
    EXPECT_FALSE(comm.AllReduceSum(absl::MakeSpan(v)).ok());
  });
}

}  // namespace
}  // namespace tpserve
