#include "worker/layers/embedding.h"

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/dtype.h"
#include "worker/comm/local_comm_group.h"
#include "worker/layers/test_util.h"

namespace tpserve {
namespace {

constexpr int64_t kVocab = 331;  // divisible by none of 2, 3, 4
constexpr int64_t kHidden = 12;

class VocabParallelTest : public ::testing::TestWithParam<int> {};

TEST_P(VocabParallelTest, EmbeddingMatchesFullTable) {
  const int tp = GetParam();
  const Tensor table = RandomTensor({kVocab, kHidden}, 1);
  const std::vector<int32_t> ids = {0, 5, 330, 82, 83, 84, 165, 250, 330};
  RunOnLocalRanks(tp, [&](int rank, CommGroup& comm) {
    auto emb = VocabParallelEmbedding::Create(kVocab, kHidden, &comm);
    ASSERT_TRUE(emb.ok());
    const int64_t rows = PaddedVocabSize(kVocab, tp) / tp;
    ASSERT_EQ((*emb)->weight().shape(), (Shape{rows, kHidden}));
    ASSERT_TRUE((*emb)->WeightLoader((*emb)->weight(), table).ok());
    // Padded rows (global index ≥ V) are zero.
    for (int64_t i = 0; i < rows; ++i) {
      if (rank * rows + i < kVocab) continue;
      for (int64_t j = 0; j < kHidden; ++j) EXPECT_EQ((*emb)->weight().row(i)[j], 0.0f);
    }
    auto out = (*emb)->Forward(ids);
    ASSERT_TRUE(out.ok()) << out.status();
    for (size_t i = 0; i < ids.size(); ++i) {
      for (int64_t j = 0; j < kHidden; ++j) EXPECT_EQ(out->row(i)[j], table.row(ids[i])[j]);
    }
  });
}

TEST_P(VocabParallelTest, LmHeadReturnsExactlyVLogits) {
  const int tp = GetParam();
  const Tensor w = RandomTensor({kVocab, kHidden}, 2), x = RandomTensor({4, kHidden}, 3);
  const Tensor want = ReferenceLinear(x, w, Tensor());
  for (bool tied : {false, true}) {
    RunOnLocalRanks(tp, [&](int, CommGroup& comm) {
      auto emb = VocabParallelEmbedding::Create(kVocab, kHidden, &comm);
      ASSERT_TRUE(emb.ok());
      ASSERT_TRUE((*emb)->WeightLoader((*emb)->weight(), w).ok());
      auto head = ParallelLMHead::Create(kHidden, kVocab, &comm, tied ? emb->get() : nullptr);
      ASSERT_TRUE(head.ok());
      if (!tied) {
        ASSERT_TRUE((*head)->WeightLoader((*head)->weight(), w).ok());
      } else {
        EXPECT_FALSE((*head)->WeightLoader((*head)->weight(), w).ok());
      }
      auto logits = (*head)->Forward(x);
      ASSERT_TRUE(logits.ok()) << logits.status();
      EXPECT_EQ(logits->shape(), (Shape{4, kVocab}));
      EXPECT_LT(RelativeError(*logits, want), 1e-5);
    });
  }
}

// An untied head in bf16: the same V logits within bf16's rounding; a tied one refuses
// (the embedding's fp32 shard stays what it reads).
TEST_P(VocabParallelTest, LmHeadInBf16ReturnsTheSameLogitsWithinBf16Rounding) {
  const int tp = GetParam();
  const Tensor w = RandomTensor({kVocab, kHidden}, 4), x = RandomTensor({5, kHidden}, 5);
  const Tensor want = ReferenceLinear(x, w, Tensor());
  RunOnLocalRanks(tp, [&](int, CommGroup& comm) {
    auto head = ParallelLMHead::Create(kHidden, kVocab, &comm);
    ASSERT_TRUE(head.ok());
    ASSERT_TRUE((*head)->WeightLoader((*head)->weight(), w).ok());
    ASSERT_TRUE((*head)->PackWeight(WeightFormat::kBf16).ok());
    EXPECT_EQ((*head)->packed_format(), WeightFormat::kBf16);
    EXPECT_TRUE((*head)->weight().empty());
    auto logits = (*head)->Forward(x);
    ASSERT_TRUE(logits.ok()) << logits.status();
    EXPECT_EQ(logits->shape(), (Shape{5, kVocab}));
    EXPECT_LT(RelativeError(*logits, want), 2e-2);
    EXPECT_FALSE((*head)->WeightLoader((*head)->weight(), w).ok());

    // Tied: the table loads as bf16 rows (rounded from an F32 checkpoint view), the head
    // packs its copy from them; lookups give the bf16-rounded rows exactly.
    auto emb = VocabParallelEmbedding::Create(kVocab, kHidden, &comm);
    ASSERT_TRUE(emb.ok());
    auto tied = ParallelLMHead::Create(kHidden, kVocab, &comm, emb->get());
    ASSERT_TRUE(tied.ok());
    auto unpacked = ParallelLMHead::Create(kHidden, kVocab, &comm, emb->get());
    ASSERT_TRUE(unpacked.ok());
    ASSERT_TRUE((*emb)->WeightLoaderBf16(WeightView{w.data(), DType::kF32, w.shape()}).ok());
    ASSERT_TRUE((*tied)->PackWeight(WeightFormat::kBf16).ok());
    EXPECT_TRUE((*emb)->weight_is_bf16());
    EXPECT_TRUE((*emb)->weight().empty());
    auto tied_logits = (*tied)->Forward(x);
    ASSERT_TRUE(tied_logits.ok()) << tied_logits.status();
    EXPECT_LT(RelativeError(*tied_logits, want), 2e-2);
    EXPECT_EQ((*unpacked)->Forward(x).status().code(), absl::StatusCode::kFailedPrecondition);
    // An int8 head from the same bf16 table (the table itself stays bf16 for lookups).
    auto tied8 = ParallelLMHead::Create(kHidden, kVocab, &comm, emb->get());
    ASSERT_TRUE(tied8.ok());
    ASSERT_TRUE((*tied8)->PackWeight(WeightFormat::kInt8).ok());
    EXPECT_EQ((*tied8)->packed_format(), WeightFormat::kInt8);
    EXPECT_TRUE((*emb)->weight_is_bf16());
    auto int8_logits = (*tied8)->Forward(x);
    ASSERT_TRUE(int8_logits.ok()) << int8_logits.status();
    EXPECT_LT(RelativeError(*int8_logits, want), 3e-2);
    EXPECT_GT(RelativeError(*int8_logits, *tied_logits), 0.0);
    const std::vector<int32_t> ids = {0, kVocab - 1, 3};
    auto rows = (*emb)->Forward(ids);
    ASSERT_TRUE(rows.ok()) << rows.status();
    for (size_t i = 0; i < ids.size(); ++i) {
      for (int64_t j = 0; j < kHidden; ++j) {
        EXPECT_EQ(rows->row(i)[j], Bf16ToFloat(FloatToBf16(w.row(ids[i])[j])));
      }
    }
    EXPECT_EQ((*emb)->WeightLoader((*emb)->weight(), w).code(),
              absl::StatusCode::kFailedPrecondition);
  });
}

// An untied head packed straight from a checkpoint view (WeightLoaderPacked) computes
// the same logits, bit for bit, as a tied head packed from an embedding table loaded from
// that view: the same bf16 rounding and zero padding rows, in either format. Hidden
// 16384 makes the int8 quantizer ask for 128 rows at a time, so at tp 2 and 3 a chunk
// holds real rows and padding ones.
TEST_P(VocabParallelTest, LmHeadPackedFromAViewMatchesTheTiedPacking) {
  const int tp = GetParam();
  const int64_t hidden = 16384;
  const Tensor w = RandomTensor({kVocab, hidden}, 8), x = RandomTensor({3, hidden}, 9);
  const WeightView view{w.data(), DType::kF32, w.shape()};
  RunOnLocalRanks(tp, [&](int, CommGroup& comm) {
    auto emb = VocabParallelEmbedding::Create(kVocab, hidden, &comm);
    ASSERT_TRUE(emb.ok());
    ASSERT_TRUE((*emb)->WeightLoaderBf16(view).ok());
    for (WeightFormat format : {WeightFormat::kBf16, WeightFormat::kInt8}) {
      auto tied = ParallelLMHead::Create(hidden, kVocab, &comm, emb->get());
      auto head = ParallelLMHead::Create(hidden, kVocab, &comm);
      ASSERT_TRUE(tied.ok() && head.ok());
      ASSERT_TRUE((*tied)->PackWeight(format).ok());
      EXPECT_EQ((*tied)->WeightLoaderPacked(view, format).code(),
                absl::StatusCode::kInvalidArgument);
      const absl::Status loaded = (*head)->WeightLoaderPacked(view, format);
      ASSERT_TRUE(loaded.ok()) << loaded;
      EXPECT_EQ((*head)->packed_format(), format);
      EXPECT_TRUE((*head)->weight().empty());
      EXPECT_TRUE((*head)->PackWeight(format).ok());  // packed already: nothing to do
      EXPECT_EQ((*head)->PackWeight(format == WeightFormat::kInt8 ? WeightFormat::kBf16
                                                                 : WeightFormat::kInt8)
                    .code(),
                absl::StatusCode::kFailedPrecondition);
      EXPECT_EQ((*head)->WeightLoaderPacked(view, format).code(),
                absl::StatusCode::kInvalidArgument);  // once
      auto got = (*head)->Forward(x);
      auto want = (*tied)->Forward(x);
      ASSERT_TRUE(got.ok() && want.ok());
      ASSERT_EQ(got->shape(), (Shape{3, kVocab}));
      for (int64_t i = 0; i < got->numel(); ++i) {
        ASSERT_EQ(got->data()[i], want->data()[i]) << i << " " << WeightFormatName(format);
      }
    }
  });
}

// WeightLoaderPacked refuses a tensor of the wrong shape and a non-finite weight, naming
// the head and where the value is.
TEST(ParallelLMHeadTest, PackedLoaderRejectsBadTensors) {
  RunOnLocalRanks(1, [&](int, CommGroup& comm) {
    Tensor w = RandomTensor({kVocab, kHidden}, 10);
    for (WeightFormat format : {WeightFormat::kBf16, WeightFormat::kInt8}) {
      auto head = ParallelLMHead::Create(kHidden, kVocab, &comm);
      ASSERT_TRUE(head.ok());
      const absl::Status shape = (*head)->WeightLoaderPacked(
          WeightView{w.data(), DType::kF32, {kVocab - 1, kHidden}}, format);
      EXPECT_EQ(shape.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_NE(shape.message().find("lm_head"), std::string::npos) << shape;
      w.row(300)[7] = std::numeric_limits<float>::quiet_NaN();
      const absl::Status nan =
          (*head)->WeightLoaderPacked(WeightView{w.data(), DType::kF32, w.shape()}, format);
      EXPECT_EQ(nan.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_NE(nan.message().find("[300, 7]"), std::string::npos) << nan;
      EXPECT_EQ((*head)->packed_format(), std::nullopt);
      w.row(300)[7] = 0.5f;
    }
  });
}

TEST_P(VocabParallelTest, RejectsOutOfRangeIdsOnEveryRank) {
  const int tp = GetParam();
  RunOnLocalRanks(tp, [&](int, CommGroup& comm) {
    auto emb = VocabParallelEmbedding::Create(kVocab, kHidden, &comm);
    ASSERT_TRUE(emb.ok());
    // 331 is a padded row on the last rank: it must not read as a zero embedding.
    for (int32_t bad : {-1, int32_t(kVocab), int32_t(PaddedVocabSize(kVocab, tp)) - 1}) {
      auto out = (*emb)->Forward(std::vector<int32_t>{1, bad});
      ASSERT_FALSE(out.ok());
      EXPECT_NE(out.status().message().find("outside the vocab"), std::string::npos);
    }
  });
}

// The head's product, gather and unpadded logits take storage without clearing it
// (Tensor::Uninitialized): recycled blocks of 1 MiB and more, malloc below. Storage of
// every size the head asks for, filled with NaN and released just before the call, is
// what it gets back; every logit must still be written (fp32, bf16 and int8 heads).
TEST_P(VocabParallelTest, LmHeadWritesEveryLogitOverUnclearedStorage) {
  const int tp = GetParam();
  constexpr int64_t kBigVocab = 3001, kRows = 100;  // [100, 3001] logits: 1.1 MiB
  const Tensor w = RandomTensor({kBigVocab, kHidden}, 6), x = RandomTensor({kRows, kHidden}, 7);
  const Tensor want = ReferenceLinear(x, w, Tensor());
  const int64_t vp = PaddedVocabSize(kBigVocab, tp);
  const auto poison = [&] {
    std::vector<Tensor> garbage;
    for (const Shape& shape : {Shape{kRows, kBigVocab}, Shape{kRows, vp}, Shape{kRows, vp / tp},
                               Shape{tp, kRows, vp / tp}}) {
      garbage.emplace_back(shape);
      for (float& v : garbage.back().span()) v = std::numeric_limits<float>::quiet_NaN();
    }
  };
  for (int format = 0; format < 3; ++format) {
    RunOnLocalRanks(tp, [&](int, CommGroup& comm) {
      auto head = ParallelLMHead::Create(kHidden, kBigVocab, &comm);
      ASSERT_TRUE(head.ok());
      ASSERT_TRUE((*head)->WeightLoader((*head)->weight(), w).ok());
      if (format > 0) {
        ASSERT_TRUE(
            (*head)->PackWeight(format == 1 ? WeightFormat::kBf16 : WeightFormat::kInt8).ok());
      }
      for (int call = 0; call < 2; ++call) {
        poison();
        auto logits = (*head)->Forward(x);
        ASSERT_TRUE(logits.ok()) << logits.status();
        ASSERT_EQ(logits->shape(), (Shape{kRows, kBigVocab}));
        int64_t non_finite = 0;
        for (float v : logits->span()) non_finite += !std::isfinite(v);
        EXPECT_EQ(non_finite, 0) << "format " << format;
        EXPECT_LT(RelativeError(*logits, want), format == 0 ? 1e-5 : 3e-2);
      }
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Tp, VocabParallelTest, ::testing::Values(1, 2, 3, 4));

TEST(VocabParallelEmbeddingTest, PaddedVocabSize) {
  EXPECT_EQ(PaddedVocabSize(331, 1), 336);
  EXPECT_EQ(PaddedVocabSize(331, 3), 336);
  EXPECT_EQ(PaddedVocabSize(331, 4), 352);
  EXPECT_EQ(PaddedVocabSize(320, 2), 320);
}

TEST(VocabParallelEmbeddingTest, PaddingIdxFollowsTorch) {
  RunOnLocalRanks(1, [&](int, CommGroup& comm) {
    auto emb = VocabParallelEmbedding::Create(10, 4, &comm, -1);
    ASSERT_TRUE(emb.ok());
    EXPECT_EQ((*emb)->padding_idx(), 9);
    EXPECT_FALSE(VocabParallelEmbedding::Create(10, 4, &comm, 10).ok());
    EXPECT_FALSE(VocabParallelEmbedding::Create(10, 4, &comm, -11).ok());
  });
}

}  // namespace
}  // namespace tpserve
