#include "worker/layers/linear.h"

#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/comm/local_comm_group.h"
#include "worker/layers/test_util.h"

namespace tpserve {
namespace {

constexpr double kTol = 1e-5;

class LinearTest : public ::testing::TestWithParam<int> {};

TEST_P(LinearTest, ColumnParallelMatchesUnsharded) {
  const int tp = GetParam();
  const Tensor x = RandomTensor({5, 16}, 1), w = RandomTensor({24, 16}, 2), b = RandomTensor({24}, 3);
  const Tensor want = ReferenceLinear(x, w, b);
  for (bool gather : {false, true}) {
    for (bool skip_bias : {false, true}) {
      RunOnLocalRanks(tp, [&](int rank, CommGroup& comm) {
        auto layer = ColumnParallelLinear::Create(&comm, 16, 24, true, gather, skip_bias);
        ASSERT_TRUE(layer.ok()) << layer.status();
        ASSERT_TRUE((*layer)->WeightLoader((*layer)->weight(), w).ok());
        ASSERT_TRUE((*layer)->WeightLoader(*(*layer)->bias(), b).ok());
        EXPECT_EQ((*layer)->weight().shape(), (Shape{24 / tp, 16}));
        auto out = (*layer)->Forward(x);
        ASSERT_TRUE(out.ok()) << out.status();
        const int64_t cols = 24 / tp;
        Tensor expect_w = SliceRows(w, rank * cols, (rank + 1) * cols);
        Tensor expect_b = SliceRows(b, rank * cols, (rank + 1) * cols);
        EXPECT_EQ(RelativeError((*layer)->weight(), expect_w), 0.0);
        Tensor local_want = ReferenceLinear(x, expect_w, skip_bias ? Tensor() : expect_b);
        if (gather && !skip_bias) {
          EXPECT_LT(RelativeError(out->output, want), kTol);
        } else if (!gather) {
          EXPECT_LT(RelativeError(out->output, local_want), kTol);
        }
        EXPECT_EQ(out->bias != nullptr, skip_bias);
        if (skip_bias) {
          EXPECT_EQ(RelativeError(*out->bias, expect_b), 0.0);
        }
      });
    }
  }
}

TEST_P(LinearTest, MergedColumnLoadsEachShardAtItsOffset) {
  const int tp = GetParam();
  const Tensor x = RandomTensor({3, 8}, 4);
  const Tensor gate = RandomTensor({12, 8}, 5), up = RandomTensor({24, 8}, 6);
  RunOnLocalRanks(tp, [&](int rank, CommGroup& comm) {
    auto layer = MergedColumnParallelLinear::Create(&comm, 8, {12, 24}, false);
    ASSERT_TRUE(layer.ok()) << layer.status();
    Tensor& w = (*layer)->weight();
    ASSERT_EQ(w.shape(), (Shape{36 / tp, 8}));
    ASSERT_TRUE((*layer)->WeightLoader(w, gate, 0).ok());
    ASSERT_TRUE((*layer)->WeightLoader(w, up, 1).ok());
    const int64_t g = 12 / tp, u = 24 / tp;
    EXPECT_EQ(RelativeError(SliceRows(w, 0, g), SliceRows(gate, rank * g, (rank + 1) * g)), 0.0);
    EXPECT_EQ(RelativeError(SliceRows(w, g, g + u), SliceRows(up, rank * u, (rank + 1) * u)), 0.0);
    EXPECT_FALSE((*layer)->WeightLoader(w, up, 2).ok());
    EXPECT_FALSE((*layer)->WeightLoader(w, gate, 1).ok());  // wrong row count for shard 1
    EXPECT_FALSE((*layer)->WeightLoader(w, up, std::string("q")).ok());
  });
}

TEST_P(LinearTest, RowParallelAddsBiasOnce) {
  const int tp = GetParam();
  const Tensor x = RandomTensor({4, 24}, 7), w = RandomTensor({10, 24}, 8), b = RandomTensor({10}, 9);
  const Tensor want = ReferenceLinear(x, w, b);
  for (bool input_is_parallel : {true, false}) {
    RunOnLocalRanks(tp, [&](int rank, CommGroup& comm) {
      auto layer = RowParallelLinear::Create(&comm, 24, 10, true, input_is_parallel);
      ASSERT_TRUE(layer.ok()) << layer.status();
      ASSERT_TRUE((*layer)->WeightLoader((*layer)->weight(), w).ok());
      ASSERT_TRUE((*layer)->WeightLoader(*(*layer)->bias(), b).ok());
      const int64_t cols = 24 / tp;
      Tensor x_in = x;
      if (input_is_parallel) {
        x_in = Tensor({4, cols});
        for (int i = 0; i < 4; ++i) {
          for (int j = 0; j < cols; ++j) x_in.row(i)[j] = x.row(i)[rank * cols + j];
        }
      }
      auto out = (*layer)->Forward(x_in);
      ASSERT_TRUE(out.ok()) << out.status();
      EXPECT_LT(RelativeError(out->output, want), kTol);
      EXPECT_EQ(out->bias, nullptr);
    });
  }
}

TEST_P(LinearTest, RowParallelWithoutReduceReturnsPartialsAndBias) {
  const int tp = GetParam();
  const Tensor x = RandomTensor({2, 12}, 10), w = RandomTensor({6, 12}, 11), b = RandomTensor({6}, 12);
  const Tensor want = ReferenceLinear(x, w, b);
  std::vector<Tensor> partials(tp);
  RunOnLocalRanks(tp, [&](int rank, CommGroup& comm) {
    auto layer = RowParallelLinear::Create(&comm, 12, 6, true, false, /*skip_bias_add=*/true,
                                           /*reduce_results=*/false);
    ASSERT_TRUE(layer.ok()) << layer.status();
    ASSERT_TRUE((*layer)->WeightLoader((*layer)->weight(), w).ok());
    ASSERT_TRUE((*layer)->WeightLoader(*(*layer)->bias(), b).ok());
    auto out = (*layer)->Forward(x);
    ASSERT_TRUE(out.ok());
    ASSERT_NE(out->bias, nullptr);
    partials[rank] = out->output;
  });
  Tensor sum({2, 6});
  for (const Tensor& p : partials) {
    for (int i = 0; i < 12; ++i) sum.data()[i] += p.data()[i];
  }
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 6; ++j) sum.row(i)[j] += b.data()[j];
  }
  EXPECT_LT(RelativeError(sum, want), kTol);
}

TEST_P(LinearTest, RejectsSizesThatDoNotDivide) {
  const int tp = GetParam();
  if (tp == 1) return;
  RunOnLocalRanks(tp, [&](int, CommGroup& comm) {
    EXPECT_FALSE(ColumnParallelLinear::Create(&comm, 8, 12 * tp + 1).ok());
    EXPECT_FALSE(RowParallelLinear::Create(&comm, 12 * tp + 1, 8).ok());
    EXPECT_FALSE(MergedColumnParallelLinear::Create(&comm, 8, {tp * 2, tp * 2 + 1}).ok());
  });
}

// PackWeight: the same outputs within bf16's rounding of weights and inputs (fp32
// sums), the fp32 weight freed, and no loading into a packed weight.
TEST_P(LinearTest, Bf16WeightsGiveTheSameOutputsWithinBf16Rounding) {
  const int tp = GetParam();
  const Tensor x = RandomTensor({7, 96}, 11), w = RandomTensor({48, 96}, 12);
  const Tensor b = RandomTensor({48}, 13), w_row = RandomTensor({40, 96}, 14);
  constexpr double kBf16Tol = 2e-2;
  RunOnLocalRanks(tp, [&](int rank, CommGroup& comm) {
    auto column = ColumnParallelLinear::Create(&comm, 96, 48, true, /*gather_output=*/true);
    ASSERT_TRUE(column.ok());
    ASSERT_TRUE((*column)->WeightLoader((*column)->weight(), w).ok());
    ASSERT_TRUE((*column)->WeightLoader(*(*column)->bias(), b).ok());
    auto fp32 = (*column)->Forward(x);
    ASSERT_TRUE(fp32.ok());
    ASSERT_TRUE((*column)->PackWeight(WeightFormat::kBf16).ok());
    ASSERT_TRUE((*column)->PackWeight(WeightFormat::kBf16).ok());  // idempotent
    EXPECT_EQ((*column)->packed_format(), WeightFormat::kBf16);
    EXPECT_TRUE((*column)->weight().empty());
    EXPECT_EQ((*column)->output_size_per_partition(), 48 / tp);
    auto bf16 = (*column)->Forward(x);
    ASSERT_TRUE(bf16.ok()) << bf16.status();
    EXPECT_LT(RelativeError(bf16->output, fp32->output), kBf16Tol);
    EXPECT_GT(RelativeError(bf16->output, fp32->output), 0.0);  // it really is bf16
    EXPECT_EQ((*column)->WeightLoader((*column)->weight(), w).code(),
              absl::StatusCode::kFailedPrecondition);

    auto row = RowParallelLinear::Create(&comm, 96, 40, true);
    ASSERT_TRUE(row.ok());
    ASSERT_TRUE((*row)->WeightLoader((*row)->weight(), w_row).ok());
    const int64_t in_local = 96 / tp;
    Tensor x_local({7, in_local});  // this rank's columns of x
    for (int64_t i = 0; i < 7; ++i) {
      for (int64_t j = 0; j < in_local; ++j) x_local.row(i)[j] = x.row(i)[rank * in_local + j];
    }
    auto row32 = (*row)->Forward(x_local);
    ASSERT_TRUE(row32.ok());
    ASSERT_TRUE((*row)->PackWeight(WeightFormat::kBf16).ok());
    auto row16 = (*row)->Forward(x_local);
    ASSERT_TRUE(row16.ok()) << row16.status();
    EXPECT_LT(RelativeError(row16->output, row32->output), kBf16Tol);
    EXPECT_EQ((*row)->WeightLoader((*row)->weight(), w_row).code(),
              absl::StatusCode::kFailedPrecondition);
  });
}

// PackWeight(kInt8): per-output-row int8 weights give the fp32 outputs within int8's
// rounding (a step of amax/127 per row), for weights staged in bf16 and for fp32 ones;
// a packed layer is not repacked in another format.
TEST_P(LinearTest, Int8WeightsGiveTheSameOutputsWithinInt8Rounding) {
  const int tp = GetParam();
  const Tensor x = RandomTensor({7, 96}, 31), w = RandomTensor({48, 96}, 32);
  const Tensor b = RandomTensor({48}, 33), w_row = RandomTensor({40, 96}, 34);
  constexpr double kInt8Tol = 2e-2;
  const Tensor want = ReferenceLinear(x, w, b);
  const Tensor want_row = ReferenceLinear(x, w_row, Tensor());
  RunOnLocalRanks(tp, [&](int rank, CommGroup& comm) {
    auto column = ColumnParallelLinear::Create(&comm, 96, 48, true, /*gather_output=*/true);
    ASSERT_TRUE(column.ok());
    ASSERT_TRUE((*column)->WeightLoaderBf16(WeightView{w.data(), DType::kF32, w.shape()}).ok());
    ASSERT_TRUE((*column)->WeightLoader(*(*column)->bias(), b).ok());
    ASSERT_TRUE((*column)->PackWeight(WeightFormat::kInt8).ok());
    ASSERT_TRUE((*column)->PackWeight(WeightFormat::kInt8).ok());  // idempotent
    EXPECT_EQ((*column)->PackWeight(WeightFormat::kBf16).code(),
              absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ((*column)->packed_format(), WeightFormat::kInt8);
    auto int8 = (*column)->Forward(x);
    ASSERT_TRUE(int8.ok()) << int8.status();
    EXPECT_LT(RelativeError(int8->output, want), kInt8Tol);
    EXPECT_GT(RelativeError(int8->output, want), 1e-4);  // it really is quantized

    auto row = RowParallelLinear::Create(&comm, 96, 40, false);
    ASSERT_TRUE(row.ok());
    ASSERT_TRUE((*row)->WeightLoader((*row)->weight(), w_row).ok());
    ASSERT_TRUE((*row)->PackWeight(WeightFormat::kInt8).ok());
    EXPECT_TRUE((*row)->weight().empty());
    const int64_t in_local = 96 / tp;
    Tensor x_local({7, in_local});  // this rank's columns of x
    for (int64_t i = 0; i < 7; ++i) {
      for (int64_t j = 0; j < in_local; ++j) x_local.row(i)[j] = x.row(i)[rank * in_local + j];
    }
    auto row8 = (*row)->Forward(x_local);
    ASSERT_TRUE(row8.ok()) << row8.status();
    EXPECT_LT(RelativeError(row8->output, want_row), kInt8Tol);
  });
}

// A checkpoint tensor's bytes in `dtype` and the fp32 values they hold.
struct Stored {
  std::vector<uint8_t> bytes;
  Tensor widened;  // what the fp32 loader would read
  WeightView view() const { return {bytes.data() + 1, dtype, widened.shape()}; }
  DType dtype;
};

Stored Store(const Tensor& t, DType dtype) {
  Stored s;
  s.dtype = dtype;
  s.widened = t;
  const size_t element = DTypeSize(dtype);
  s.bytes.resize(1 + t.numel() * element);  // offset by one byte: views may be unaligned
  for (int64_t i = 0; i < t.numel(); ++i) {
    uint8_t* at = s.bytes.data() + 1 + i * element;
    float& value = s.widened.data()[i];
    if (dtype == DType::kF32) {
      std::memcpy(at, &value, 4);
    } else {
      const uint16_t bits = dtype == DType::kBF16 ? FloatToBf16(value) : _cvtss_sh(value, 0);
      std::memcpy(at, &bits, 2);
      value = dtype == DType::kBF16 ? Bf16ToFloat(bits) : F16ToFloat(bits);
    }
  }
  return s;
}

// An attention block's and an MLP's checkpoint tensors ([out, in]) stored as `dtype`.
struct BlockTensors {
  BlockTensors(DType dtype, uint32_t seed)
      : q(Store(RandomTensor({48, 48}, seed), dtype)),
        k(Store(RandomTensor({48, 48}, seed + 1), dtype)),
        v(Store(RandomTensor({48, 48}, seed + 2), dtype)),
        gate(Store(RandomTensor({24, 48}, seed + 3), dtype)),
        up(Store(RandomTensor({36, 48}, seed + 4), dtype)),
        down(Store(RandomTensor({48, 96}, seed + 5), dtype)) {}
  Stored q, k, v, gate, up, down;
};

// Two of each layer over `comm`, [0] and [1], whose outputs a test compares.
struct LayerPairs {
  explicit LayerPairs(CommGroup& comm) {
    for (int i = 0; i < 2; ++i) {
      qkv[i] = *QKVParallelLinear::Create(&comm, 48, 4, 12, 12, false);
      gate_up[i] = *MergedColumnParallelLinear::Create(&comm, 48, {24, 36}, false);
      row[i] = *RowParallelLinear::Create(&comm, 96, 48, false);
    }
  }
  // Pair i's q, k and v through the bf16 loader.
  void LoadQkvBf16(int i, const BlockTensors& t) {
    const char* ids[] = {"q", "k", "v"};
    const Stored* sources[] = {&t.q, &t.k, &t.v};
    for (int j = 0; j < 3; ++j) {
      ASSERT_TRUE(qkv[i]->WeightLoaderBf16(sources[j]->view(), std::string(ids[j])).ok());
    }
  }
  // Every layer of pair 0 gives pair 1's outputs bit for bit (x: [5, 48], x_row: [5, 96/T]).
  void ExpectSameOutputs(const Tensor& x, const Tensor& x_row, DType dtype) const {
    auto same = [&](const LinearOutput& a, const LinearOutput& b) {
      ASSERT_EQ(a.output.shape(), b.output.shape());
      for (int64_t i = 0; i < a.output.numel(); ++i) {
        ASSERT_EQ(a.output.data()[i], b.output.data()[i]) << DTypeName(dtype) << " " << i;
      }
    };
    same(*qkv[0]->Forward(x), *qkv[1]->Forward(x));
    same(*gate_up[0]->Forward(x), *gate_up[1]->Forward(x));
    same(*row[0]->Forward(x_row), *row[1]->Forward(x_row));
  }
  std::unique_ptr<QKVParallelLinear> qkv[2];
  std::unique_ptr<MergedColumnParallelLinear> gate_up[2];
  std::unique_ptr<RowParallelLinear> row[2];
};

// WeightLoaderBf16 from a checkpoint view (F32, BF16 or F16, unaligned) packs exactly
// what WeightLoader + PackWeight packs: outputs are bit for bit the same.
TEST_P(LinearTest, Bf16LoadersFromTheCheckpointMatchLoadingFp32ThenPacking) {
  const int tp = GetParam();
  const Tensor x = RandomTensor({5, 48}, 21);
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    const BlockTensors t(dtype, 22);
    RunOnLocalRanks(tp, [&](int rank, CommGroup& comm) {
      LayerPairs l(comm);
      const char* ids[] = {"q", "k", "v"};
      const Stored* qkv_src[] = {&t.q, &t.k, &t.v};
      for (int j = 0; j < 3; ++j) {
        ASSERT_TRUE(l.qkv[0]
                        ->WeightLoader(l.qkv[0]->weight(), qkv_src[j]->widened,
                                       std::string(ids[j]))
                        .ok());
      }
      l.LoadQkvBf16(1, t);
      ASSERT_TRUE(l.gate_up[0]->WeightLoader(l.gate_up[0]->weight(), t.gate.widened, 0).ok());
      ASSERT_TRUE(l.gate_up[0]->WeightLoader(l.gate_up[0]->weight(), t.up.widened, 1).ok());
      ASSERT_TRUE(l.gate_up[1]->WeightLoaderBf16(t.gate.view(), 0).ok());
      ASSERT_TRUE(l.gate_up[1]->WeightLoaderBf16(t.up.view(), 1).ok());
      ASSERT_TRUE(l.row[0]->WeightLoader(l.row[0]->weight(), t.down.widened).ok());
      ASSERT_TRUE(l.row[1]->WeightLoaderBf16(t.down.view()).ok());
      EXPECT_TRUE(l.qkv[1]->weight().empty());  // the fp32 weight was never filled
      EXPECT_EQ(l.qkv[1]->Forward(x).status().code(), absl::StatusCode::kFailedPrecondition)
          << "staged but not packed";
      for (int i = 0; i < 2; ++i) {
        ASSERT_TRUE(l.qkv[i]->PackWeight(WeightFormat::kBf16).ok());
        ASSERT_TRUE(l.gate_up[i]->PackWeight(WeightFormat::kBf16).ok());
        ASSERT_TRUE(l.row[i]->PackWeight(WeightFormat::kBf16).ok());
      }
      l.ExpectSameOutputs(x, RandomTensor({5, 96 / tp}, 30 + rank), dtype);
    });
  }
}

// After LoadAsInt8 the bf16 loaders quantize their rows straight to int8: the packed
// weights give bit for bit what staging the same rows in bf16 and PackWeight(kInt8) give.
// A layer packs only when every row was loaded, only as int8, and computes only once
// packed.
TEST_P(LinearTest, Int8LoadersQuantizeWhatTheStagedCopyWould) {
  const int tp = GetParam();
  const Tensor x = RandomTensor({5, 48}, 41);
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    const BlockTensors t(dtype, 42);
    RunOnLocalRanks(tp, [&](int rank, CommGroup& comm) {
      LayerPairs l(comm);
      ASSERT_TRUE(l.qkv[1]->LoadAsInt8().ok());
      ASSERT_TRUE(l.gate_up[1]->LoadAsInt8().ok());
      ASSERT_TRUE(l.row[1]->LoadAsInt8().ok());
      EXPECT_TRUE(l.qkv[1]->weight().empty());  // the fp32 weight is never filled
      EXPECT_EQ(l.qkv[1]->LoadAsInt8().code(), absl::StatusCode::kFailedPrecondition);
      EXPECT_EQ(l.row[1]->WeightLoader(l.row[1]->weight(), t.down.widened).code(),
                absl::StatusCode::kFailedPrecondition);
      for (int i = 0; i < 2; ++i) {
        l.LoadQkvBf16(i, t);
        ASSERT_TRUE(l.gate_up[i]->WeightLoaderBf16(t.gate.view(), 0).ok());
        ASSERT_TRUE(l.row[i]->WeightLoaderBf16(t.down.view()).ok());
      }
      EXPECT_EQ(l.gate_up[1]->WeightLoaderBf16(t.gate.view(), 0).code(),
                absl::StatusCode::kInvalidArgument);  // its rows are in already
      const absl::Status missing = l.gate_up[1]->PackWeight(WeightFormat::kInt8);
      EXPECT_EQ(missing.code(), absl::StatusCode::kFailedPrecondition);
      EXPECT_NE(missing.message().find("never quantized"), std::string::npos) << missing;
      for (int i = 0; i < 2; ++i) ASSERT_TRUE(l.gate_up[i]->WeightLoaderBf16(t.up.view(), 1).ok());
      EXPECT_EQ(l.qkv[1]->Forward(x).status().code(), absl::StatusCode::kFailedPrecondition);
      EXPECT_EQ(l.qkv[1]->PackWeight(WeightFormat::kBf16).code(),
                absl::StatusCode::kFailedPrecondition);
      EXPECT_EQ(l.row[1]->PackWeight(WeightFormat::kBf16).code(),
                absl::StatusCode::kFailedPrecondition);
      for (int i = 0; i < 2; ++i) {
        ASSERT_TRUE(l.qkv[i]->PackWeight(WeightFormat::kInt8).ok());
        ASSERT_TRUE(l.gate_up[i]->PackWeight(WeightFormat::kInt8).ok());
        ASSERT_TRUE(l.row[i]->PackWeight(WeightFormat::kInt8).ok());
      }
      EXPECT_TRUE(l.qkv[1]->PackWeight(WeightFormat::kInt8).ok());  // idempotent
      EXPECT_EQ(l.qkv[1]->packed_format(), WeightFormat::kInt8);
      l.ExpectSameOutputs(x, RandomTensor({5, 96 / tp}, 50 + rank), dtype);
    });
  }
}

TEST(LinearBf16LoaderTest, NonFiniteValueInTheSliceIsNamed) {
  Tensor w = RandomTensor({8, 4}, 40);
  w.row(5)[2] = std::numeric_limits<float>::infinity();
  const Stored bad = Store(w, DType::kF32);
  RunOnLocalRanks(2, [&](int rank, CommGroup& comm) {
    auto layer = *ColumnParallelLinear::Create(&comm, 4, 8, false);
    const absl::Status s = layer->WeightLoaderBf16(bad.view());
    if (rank == 1) {  // rows [4, 8) hold it
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_NE(s.message().find("at [5, 2]"), std::string::npos) << s;
    } else {
      EXPECT_TRUE(s.ok()) << s;
    }
  });
  // An F32 value that only rounding to bf16 makes infinite.
  Tensor big = RandomTensor({2, 4}, 41);
  big.row(1)[3] = 3.4e38f;
  const Stored rounds_to_inf = Store(big, DType::kF32);
  RunOnLocalRanks(1, [&](int, CommGroup& comm) {
    auto layer = *RowParallelLinear::Create(&comm, 4, 2, false);
    const absl::Status s = layer->WeightLoaderBf16(rounds_to_inf.view());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("at [1, 3]"), std::string::npos) << s;
  });
}

// A layer's output takes recycled storage without clearing it (Tensor::Uninitialized):
// every packed format must write each element. Storage poisoned with NaN and released
// just before each call is the block the output gets (same size); a skipped element
// shows as NaN.
TEST(LinearOutputTest, EveryOutputElementIsWrittenOverRecycledStorage) {
  constexpr int64_t kRows = 64, kIn = 64, kOut = 4096;  // output: 1 MiB, a recycled size
  const Tensor x = RandomTensor({kRows, kIn}, 50), w = RandomTensor({kOut, kIn}, 51);
  const Tensor want = ReferenceLinear(x, w, Tensor());
  const auto poison = [] {
    Tensor garbage({kRows, kOut});
    for (float& v : garbage.span()) v = std::numeric_limits<float>::quiet_NaN();
  };
  for (WeightFormat format : {WeightFormat::kBf16, WeightFormat::kInt8}) {
    RunOnLocalRanks(1, [&](int, CommGroup& comm) {
      auto column = *ColumnParallelLinear::Create(&comm, kIn, kOut, false);
      ASSERT_TRUE(column->WeightLoader(column->weight(), w).ok());
      ASSERT_TRUE(column->PackWeight(format).ok());
      auto row = *RowParallelLinear::Create(&comm, kIn, kOut, false);
      ASSERT_TRUE(row->WeightLoader(row->weight(), w).ok());
      ASSERT_TRUE(row->PackWeight(format).ok());
      for (int i = 0; i < 2; ++i) {
        poison();
        auto out = i == 0 ? column->Forward(x) : row->Forward(x);
        ASSERT_TRUE(out.ok()) << out.status();
        int64_t non_finite = 0;
        for (float v : out->output.span()) non_finite += !std::isfinite(v);
        EXPECT_EQ(non_finite, 0) << (i == 0 ? "column" : "row") << " format "
                                 << static_cast<int>(format);
        EXPECT_LT(RelativeError(out->output, want), 2e-2);
      }
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Tp, LinearTest, ::testing::Values(1, 2, 3, 4));

TEST(RowParallelLinearTest, ReduceOffWithBiasAddedIsAnError) {
  RunOnLocalRanks(2, [&](int, CommGroup& comm) {
    auto layer = RowParallelLinear::Create(&comm, 8, 4, true, true, false, false);
    EXPECT_FALSE(layer.ok());
  });
}

}  // namespace
}  // namespace tpserve
