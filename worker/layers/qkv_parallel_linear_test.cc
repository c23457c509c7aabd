#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/comm/local_comm_group.h"
#include "worker/layers/linear.h"
#include "worker/layers/test_util.h"

namespace tpserve {
namespace {

struct QkvCase {
  int tp, hidden, head, heads, kv_heads, v_head;
};

class QkvTest : public ::testing::TestWithParam<QkvCase> {};

// Checks each rank's q/k/v columns of the output against the unsharded projections of
// the heads that rank should own.
TEST_P(QkvTest, EachRankComputesItsHeads) {
  const QkvCase c = GetParam();
  const Tensor x = RandomTensor({3, c.hidden}, 1);
  const Tensor wq = RandomTensor({c.heads * c.head, c.hidden}, 2);
  const Tensor wk = RandomTensor({c.kv_heads * c.head, c.hidden}, 3);
  const Tensor wv = RandomTensor({c.kv_heads * c.v_head, c.hidden}, 4);
  const Tensor bq = RandomTensor({c.heads * c.head}, 5), bk = RandomTensor({c.kv_heads * c.head}, 6);
  const Tensor bv = RandomTensor({c.kv_heads * c.v_head}, 7);
  const Tensor q = ReferenceLinear(x, wq, bq), k = ReferenceLinear(x, wk, bk);
  const Tensor v = ReferenceLinear(x, wv, bv);
  RunOnLocalRanks(c.tp, [&](int rank, CommGroup& comm) {
    auto layer = QKVParallelLinear::Create(&comm, c.hidden, c.head, c.heads, c.kv_heads, true,
                                           false, c.v_head);
    ASSERT_TRUE(layer.ok()) << layer.status();
    QKVParallelLinear& l = **layer;
    for (auto [name, w, b] : {std::tuple<std::string, const Tensor*, const Tensor*>{"q", &wq, &bq},
                              {"k", &wk, &bk}, {"v", &wv, &bv}}) {
      ASSERT_TRUE(l.WeightLoader(l.weight(), *w, name).ok()) << name;
      ASSERT_TRUE(l.WeightLoader(*l.bias(), *b, name).ok()) << name;
    }
    const int64_t nq = l.num_heads(), nkv = l.num_kv_heads();
    EXPECT_EQ(nq, c.heads / c.tp);
    // Every kv head lives on num_kv_head_replicas ranks.
    EXPECT_EQ(nkv * c.tp / l.num_kv_head_replicas(), c.kv_heads);
    auto out = l.Forward(x);
    ASSERT_TRUE(out.ok()) << out.status();
    const Tensor& y = out->output;  // [3, nq·d + nkv·d + nkv·dv]
    ASSERT_EQ(y.dim(1), nq * c.head + nkv * c.head + nkv * c.v_head);
    const int64_t kv_head0 = (rank / l.num_kv_head_replicas()) * nkv;
    for (int64_t i = 0; i < 3; ++i) {
      for (int64_t j = 0; j < nq * c.head; ++j) {
        EXPECT_NEAR(y.row(i)[j], q.row(i)[rank * nq * c.head + j], 1e-4);
      }
      for (int64_t j = 0; j < nkv * c.head; ++j) {
        EXPECT_NEAR(y.row(i)[nq * c.head + j], k.row(i)[kv_head0 * c.head + j], 1e-4);
      }
      for (int64_t j = 0; j < nkv * c.v_head; ++j) {
        EXPECT_NEAR(y.row(i)[(nq + nkv) * c.head + j], v.row(i)[kv_head0 * c.v_head + j], 1e-4);
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, QkvTest,
    ::testing::Values(QkvCase{1, 64, 8, 8, 2, 8}, QkvCase{2, 64, 8, 8, 2, 8},
                      QkvCase{4, 64, 8, 8, 2, 8},   // DESIGN.md's example: rep = 2
                      QkvCase{8, 64, 8, 8, 2, 8},   // rep = 4
                      QkvCase{3, 48, 8, 6, 3, 8},   // T = 3
                      QkvCase{2, 32, 16, 4, 4, 8},  // head_dim ≠ hidden/heads, v_head_size
                      QkvCase{4, 32, 16, 4, 1, 12}));

TEST(QkvLayoutTest, DesignExampleRankHoldsExpectedRows) {
  // hidden 64, H=8, K=2, T=4 -> d=8, n_q=2, n_kv=1, rep=2: rank r holds q heads 2r, 2r+1
  // and kv head r/2.
  Tensor wq({64, 64}), wk({16, 64}), wv({16, 64});
  for (int64_t i = 0; i < 64; ++i) std::fill(wq.row(i), wq.row(i) + 64, float(i / 8));
  for (int64_t i = 0; i < 16; ++i) std::fill(wk.row(i), wk.row(i) + 64, float(100 + i / 8));
  for (int64_t i = 0; i < 16; ++i) std::fill(wv.row(i), wv.row(i) + 64, float(200 + i / 8));
  RunOnLocalRanks(4, [&](int rank, CommGroup& comm) {
    auto layer = QKVParallelLinear::Create(&comm, 64, 8, 8, 2, false);
    ASSERT_TRUE(layer.ok());
    Tensor& w = (*layer)->weight();
    ASSERT_EQ(w.shape(), (Shape{32, 64}));
    ASSERT_TRUE((*layer)->WeightLoader(w, wq, std::string("q")).ok());
    ASSERT_TRUE((*layer)->WeightLoader(w, wk, std::string("k")).ok());
    ASSERT_TRUE((*layer)->WeightLoader(w, wv, std::string("v")).ok());
    EXPECT_EQ(w.row(0)[0], 2 * rank);
    EXPECT_EQ(w.row(8)[0], 2 * rank + 1);
    EXPECT_EQ(w.row(16)[0], 100 + rank / 2);
    EXPECT_EQ(w.row(24)[0], 200 + rank / 2);
    EXPECT_FALSE((*layer)->WeightLoader(w, wq, kNoShard).ok());
    EXPECT_FALSE((*layer)->WeightLoader(w, wk, std::string("q")).ok());  // wrong rows for q
  });
}

TEST(QkvLayoutTest, RejectsTpThatSplitsNoHeads) {
  RunOnLocalRanks(3, [&](int, CommGroup& comm) {
    EXPECT_FALSE(QKVParallelLinear::Create(&comm, 64, 8, 8, 2).ok());  // 8 % 3
  });
  RunOnLocalRanks(4, [&](int, CommGroup& comm) {
    EXPECT_FALSE(QKVParallelLinear::Create(&comm, 48, 8, 12, 3).ok());  // 4 % 3 with T > K
    EXPECT_FALSE(QKVParallelLinear::Create(&comm, 48, 8, 12, 6).ok());  // 6 % 4 with T < K
  });
}

}  // namespace
}  // namespace tpserve
