// The fused rope kernel on the GPU against the unfused CPU reference (RmsNorm per head,
// then RotaryEmbedding::Apply), in both dtypes, for the none, linear and llama3 scalings,
// with and without Qwen3's q/k norms. qkv is rotated in place inside guard regions; the
// v columns and the row padding must come back bit for bit.
// Tagged "gpu"; skips when no CUDA device is present.
#include "worker/kernels/cuda/rope.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/kernels/cpu/norm_activation.h"
#include "worker/kernels/cpu/rope.h"
#include "worker/kernels/cuda/cuda_test_util.h"
#include "worker/loader/hf_config.h"

namespace tpserve {
namespace {

constexpr float kEps = 1e-6f;
constexpr int kMaxPositions = 4096;

struct RopeCase {
  int64_t n;
  int num_q_heads, num_kv_heads, head_dim;
  int64_t pad;  // extra columns after v
};
// Fixture head dims and real ones; half a head shorter than a warp (d = 4 .. 48) and
// longer (64 .. 512, the vector paths); odd padding forces the scalar path.
constexpr RopeCase kCases[] = {{1, 1, 1, 4, 0},   {7, 4, 2, 8, 0},    {5, 2, 1, 16, 3},
                               {33, 8, 2, 32, 0}, {9, 3, 1, 48, 0},   {3, 2, 2, 128, 1},
                               {3, 2, 0, 64, 0},  {17, 8, 2, 128, 0}, {4, 4, 1, 256, 0},
                               {2, 2, 1, 510, 0}, {2, 2, 1, 512, 0},  {333, 16, 4, 128, 0}};

enum class Norm { kNone, kQAndK, kQOnly };

struct Scaled {
  double theta;
  RopeScaling scaling;
};
const Scaled kScalings[] = {
    {10000.0, RopeScaling{}},
    {1000000.0, {RopeScaling::Type::kLinear, 4.0}},
    // A short original context puts frequencies of small heads in all three bands.
    {500000.0, {RopeScaling::Type::kLlama3, 8.0, 1.0, 4.0, 256}},
};

// Columns [first, first + width) of n rows of `stride`, taken out as [n, width] or put back.
void TakeColumns(const std::vector<float>& qkv, int64_t stride, int64_t n, int64_t first,
                 int64_t width, std::vector<float>* heads) {
  heads->resize(n * width);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t c = 0; c < width; ++c) (*heads)[t * width + c] = qkv[t * stride + first + c];
  }
}
void PutColumns(const std::vector<float>& heads, int64_t stride, int64_t n, int64_t first,
                int64_t width, std::vector<float>* qkv) {
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t c = 0; c < width; ++c) (*qkv)[t * stride + first + c] = heads[t * width + c];
  }
}

template <typename T>
void CheckRope(const RopeCase& c, const Scaled& s, Norm norm, uint32_t seed) {
  const int d = c.head_dim, nq = c.num_q_heads, nkv = c.num_kv_heads;
  const int64_t stride = int64_t{nq + 2 * nkv} * d + c.pad;
  const int64_t rotated = int64_t{nq + nkv} * d;  // columns of q and k
  const RotaryEmbedding rope(d, s.theta, s.scaling);
  const std::vector<float> table = rope.CosSinTable(kMaxPositions);

  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> pick(0, kMaxPositions - 1);
  std::vector<int32_t> positions(c.n);
  for (int32_t& p : positions) p = pick(rng);
  positions.front() = 0;
  positions.back() = kMaxPositions - 1;

  const auto qkv = RoundTo<T>(RandomVector(c.n * stride, seed + 1, 1.5f));
  const auto q_norm = RoundTo<T>(RandomVector(d, seed + 2));
  const auto k_norm = RoundTo<T>(RandomVector(d, seed + 3));
  const bool norm_q = norm != Norm::kNone, norm_k = norm == Norm::kQAndK;

  std::vector<float> want = qkv, q, k;
  TakeColumns(qkv, stride, c.n, 0, int64_t{nq} * d, &q);
  TakeColumns(qkv, stride, c.n, int64_t{nq} * d, int64_t{nkv} * d, &k);
  if (norm_q) RmsNorm(q.data(), q_norm.data(), c.n * nq, d, kEps, q.data());
  if (norm_k) RmsNorm(k.data(), k_norm.data(), c.n * nkv, d, kEps, k.data());
  rope.Apply(positions, nq, q.data());
  rope.Apply(positions, nkv, k.data());
  PutColumns(q, stride, c.n, 0, int64_t{nq} * d, &want);
  PutColumns(k, stride, c.n, int64_t{nq} * d, int64_t{nkv} * d, &want);

  GuardedOutput<T> d_qkv(qkv.size());
  d_qkv.Fill(qkv);
  const auto d_positions = DeviceArray<int32_t>::FromRaw(positions);
  const DeviceArray<float> d_table(table);
  const DeviceArray<T> d_q_norm(q_norm), d_k_norm(k_norm);
  TPSERVE_ASSERT_CUDA(LaunchRope(d_qkv.get(), stride, d_positions.get(), c.n, nq, nkv, d,
                                 d_table.get(), norm_q ? d_q_norm.get() : nullptr,
                                 norm_k ? d_k_norm.get() : nullptr, kEps, nullptr));
  TPSERVE_ASSERT_CUDA(cudaDeviceSynchronize());
  const std::vector<float> got = d_qkv.ToHostCheckingGuards();

  const std::string what = std::to_string(c.n) + " tokens, " + std::to_string(nq) + "+" +
                           std::to_string(nkv) + " heads of " + std::to_string(d) + ", scaling " +
                           std::to_string(static_cast<int>(s.scaling.type)) + ", norm " +
                           std::to_string(static_cast<int>(norm));
  // Token by token, so one wrong head among many tokens cannot hide in the average.
  for (int64_t t = 0; t < c.n; ++t) {
    std::vector<float> got_qk, want_qk, got_rest, want_rest;
    TakeColumns(got, stride, 1, t * stride, rotated, &got_qk);
    TakeColumns(want, stride, 1, t * stride, rotated, &want_qk);
    TakeColumns(got, stride, 1, t * stride + rotated, stride - rotated, &got_rest);
    TakeColumns(want, stride, 1, t * stride + rotated, stride - rotated, &want_rest);
    ASSERT_LT(RelativeError(got_qk, want_qk), KernelTolerance<T>()) << what << ", token " << t;
    ASSERT_EQ(got_rest, want_rest) << what << ", token " << t << ": v or padding changed";
  }
}

template <typename T>
class RopeCudaTest : public ::testing::Test {};
using KernelTypes = ::testing::Types<float, __nv_bfloat16>;
TYPED_TEST_SUITE(RopeCudaTest, KernelTypes);

TYPED_TEST(RopeCudaTest, MatchesUnfusedCpuReference) {
  TPSERVE_SKIP_WITHOUT_CUDA();
  uint32_t seed = 1;
  int scaling = 0;
  for (const RopeCase& c : kCases) {
    for (Norm norm : {Norm::kNone, Norm::kQAndK, Norm::kQOnly}) {
      CheckRope<TypeParam>(c, kScalings[scaling++ % 3], norm, seed += 10);
    }
  }
}

// Size checks happen before any CUDA call, so this runs without a device too.
TEST(RopeLaunchTest, RejectsInvalidSizesAndLaunchesNothingWhenEmpty) {
  float* qkv = nullptr;
  const int32_t* positions = nullptr;
  const float* table = nullptr;
  auto launch = [&](int64_t stride, int64_t n, int nq, int nkv, int d) {
    return LaunchRope<float>(qkv, stride, positions, n, nq, nkv, d, table, nullptr, nullptr, kEps,
                             nullptr);
  };
  EXPECT_EQ(launch(64, 1, 2, 1, 7), cudaErrorInvalidValue);      // odd head_dim
  EXPECT_EQ(launch(4096, 1, 2, 1, 514), cudaErrorInvalidValue);  // head_dim > 512
  EXPECT_EQ(launch(47, 1, 4, 2, 8), cudaErrorInvalidValue);      // row shorter than q + k
  EXPECT_EQ(launch(48, -1, 4, 2, 8), cudaErrorInvalidValue);     // negative n
  EXPECT_EQ(launch(48, 3, 4, 2, 8), cudaErrorInvalidValue);      // no table
  EXPECT_EQ(launch(48, 0, 4, 2, 8), cudaSuccess);
  EXPECT_EQ(launch(48, 3, 0, 0, 8), cudaSuccess);
}

}  // namespace
}  // namespace tpserve
