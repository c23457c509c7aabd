// The fused rope kernel on the GPU against the unfused CPU reference (RmsNorm per head,
// then RotaryEmbedding::Apply), in both dtypes, for the none, linear and llama3 scalings,
// with and without Qwen3's q/k norms. qkv is rotated in place inside guard regions; the
// v columns and the row padding must come back bit for bit. The same with the cache
// write fused in (LaunchRopeWriteKv): keys rotated and values copied into their slots.
// Tagged "gpu"; skips when no CUDA device is present.
#include "worker/kernels/cuda/rope.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/cuda/cuda_test_util.h"
#include "worker/kernels/cpu/norm_activation.h"
#include "worker/kernels/cpu/rope.h"
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
    // yarn: blended frequencies, and cos/sin scaled by the attention factor.
    {1000000.0, {RopeScaling::Type::kYarn, 4.0, 1.0, 4.0, 128, 32.0, 1.0, true, 1.1386}},
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

// One check's inputs, rounded to T, and the unfused CPU reference's q and k heads.
struct RopeInputs {
  std::vector<int32_t> positions;             // [n]
  std::vector<float> table;                   // [kMaxPositions, d]
  std::vector<float> qkv, q_norm, k_norm;     // [n, stride], [d], [d]
  std::vector<float> q, k;                    // [n, nq·d], [n, nkv·d]: normed and rotated
  bool norm_q = false, norm_k = false;
};

template <typename T>
RopeInputs MakeInputs(const RopeCase& c, int64_t stride, const Scaled& s, Norm norm,
                      uint32_t seed) {
  const int d = c.head_dim, nq = c.num_q_heads, nkv = c.num_kv_heads;
  const RotaryEmbedding rope(d, s.theta, s.scaling);
  RopeInputs in;
  in.table = rope.CosSinTable(kMaxPositions);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> pick(0, kMaxPositions - 1);
  in.positions.resize(c.n);
  for (int32_t& p : in.positions) p = pick(rng);
  in.positions.front() = 0;
  in.positions.back() = kMaxPositions - 1;
  in.qkv = RoundTo<T>(RandomVector(c.n * stride, seed + 1, 1.5f));
  in.q_norm = RoundTo<T>(RandomVector(d, seed + 2));
  in.k_norm = RoundTo<T>(RandomVector(d, seed + 3));
  in.norm_q = norm != Norm::kNone, in.norm_k = norm == Norm::kQAndK;
  TakeColumns(in.qkv, stride, c.n, 0, int64_t{nq} * d, &in.q);
  TakeColumns(in.qkv, stride, c.n, int64_t{nq} * d, int64_t{nkv} * d, &in.k);
  if (in.norm_q) RmsNorm(in.q.data(), in.q_norm.data(), c.n * nq, d, kEps, in.q.data());
  if (in.norm_k) RmsNorm(in.k.data(), in.k_norm.data(), c.n * nkv, d, kEps, in.k.data());
  rope.Apply(in.positions, nq, in.q.data());
  rope.Apply(in.positions, nkv, in.k.data());
  return in;
}

std::string Describe(const RopeCase& c, const Scaled& s, Norm norm) {
  return std::to_string(c.n) + " tokens, " + std::to_string(c.num_q_heads) + "+" +
         std::to_string(c.num_kv_heads) + " heads of " + std::to_string(c.head_dim) +
         ", scaling " + std::to_string(static_cast<int>(s.scaling.type)) + ", norm " +
         std::to_string(static_cast<int>(norm));
}

template <typename T>
void CheckRope(const RopeCase& c, const Scaled& s, Norm norm, uint32_t seed) {
  const int d = c.head_dim, nq = c.num_q_heads, nkv = c.num_kv_heads;
  const int64_t stride = int64_t{nq + 2 * nkv} * d + c.pad;
  const int64_t rotated = int64_t{nq + nkv} * d;  // columns of q and k
  const RopeInputs in = MakeInputs<T>(c, stride, s, norm, seed);
  std::vector<float> want = in.qkv;
  PutColumns(in.q, stride, c.n, 0, int64_t{nq} * d, &want);
  PutColumns(in.k, stride, c.n, int64_t{nq} * d, int64_t{nkv} * d, &want);

  GuardedOutput<T> d_qkv(in.qkv.size());
  d_qkv.Fill(in.qkv);
  const auto d_positions = DeviceArray<int32_t>::FromRaw(in.positions);
  const DeviceArray<float> d_table(in.table);
  const DeviceArray<T> d_q_norm(in.q_norm), d_k_norm(in.k_norm);
  TPSERVE_ASSERT_CUDA(LaunchRope(d_qkv.get(), stride, d_positions.get(), c.n, nq, nkv, d,
                                 d_table.get(), in.norm_q ? d_q_norm.get() : nullptr,
                                 in.norm_k ? d_k_norm.get() : nullptr, kEps, nullptr));
  TPSERVE_ASSERT_CUDA(cudaDeviceSynchronize());
  const std::vector<float> got = d_qkv.ToHostCheckingGuards();

  const std::string what = Describe(c, s, norm);
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

// The fused rope + cache write: q rotated in place as above; k rotated into its token's
// cache slot and v copied there bit for bit, in slots that a permutation scatters, with
// every fourth token a padding one (slot −1) that writes no slot; the row's k, v and
// padding columns and every slot no token owns stay as they were.
template <typename T>
void CheckRopeWriteKv(const RopeCase& c, int dv, const Scaled& s, Norm norm, uint32_t seed) {
  const int d = c.head_dim, nq = c.num_q_heads, nkv = c.num_kv_heads;
  const int64_t v_col = int64_t{nq + nkv} * d, stride = v_col + int64_t{nkv} * dv + c.pad;
  const int64_t q_cols = int64_t{nq} * d, k_width = int64_t{nkv} * d, v_width = int64_t{nkv} * dv;
  const RopeInputs in = MakeInputs<T>(c, stride, s, norm, seed);
  const int64_t num_slots = c.n + 3;
  std::vector<int64_t> order(num_slots), slots(c.n);
  for (int64_t i = 0; i < num_slots; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937(seed + 4));
  for (int64_t t = 0; t < c.n; ++t) slots[t] = c.n > 1 && t % 4 == 1 ? -1 : order[t];

  GuardedOutput<T> d_qkv(in.qkv.size()), k_cache(num_slots * k_width),
      v_cache(num_slots * v_width);
  d_qkv.Fill(in.qkv);
  const auto d_positions = DeviceArray<int32_t>::FromRaw(in.positions);
  const auto d_slots = DeviceArray<int64_t>::FromRaw(slots);
  const DeviceArray<float> d_table(in.table);
  const DeviceArray<T> d_q_norm(in.q_norm), d_k_norm(in.k_norm);
  RopeCacheWrite<T> cache;
  cache.slots = d_slots.get();
  cache.k_cache = k_cache.get(), cache.v_cache = v_cache.get();
  cache.v_col = v_col, cache.v_head_dim = dv;
  TPSERVE_ASSERT_CUDA(LaunchRopeWriteKv(d_qkv.get(), stride, d_positions.get(), c.n, nq, nkv, d,
                                        d_table.get(), in.norm_q ? d_q_norm.get() : nullptr,
                                        in.norm_k ? d_k_norm.get() : nullptr, kEps, cache,
                                        nullptr));
  TPSERVE_ASSERT_CUDA(cudaDeviceSynchronize());
  const std::vector<float> got = d_qkv.ToHostCheckingGuards();
  const std::vector<float> got_k = k_cache.ToHostCheckingGuards();
  const std::vector<float> got_v = v_cache.ToHostCheckingGuards();

  const std::string what = Describe(c, s, norm) + ", v heads of " + std::to_string(dv);
  std::vector<bool> owned(num_slots, false);
  for (int64_t t = 0; t < c.n; ++t) {
    std::vector<float> got_q, want_q, got_rest, want_rest;
    TakeColumns(got, stride, 1, t * stride, q_cols, &got_q);
    TakeColumns(in.q, q_cols, 1, t * q_cols, q_cols, &want_q);
    TakeColumns(got, stride, 1, t * stride + q_cols, stride - q_cols, &got_rest);
    TakeColumns(in.qkv, stride, 1, t * stride + q_cols, stride - q_cols, &want_rest);
    ASSERT_LT(RelativeError(got_q, want_q), KernelTolerance<T>()) << what << ", token " << t;
    ASSERT_EQ(got_rest, want_rest) << what << ", token " << t << ": k, v or padding changed";
    if (slots[t] < 0) continue;
    owned[slots[t]] = true;
    std::vector<float> slot_k, want_k, slot_v, want_v;
    TakeColumns(got_k, k_width, 1, slots[t] * k_width, k_width, &slot_k);
    TakeColumns(in.k, k_width, 1, t * k_width, k_width, &want_k);
    TakeColumns(got_v, v_width, 1, slots[t] * v_width, v_width, &slot_v);
    TakeColumns(in.qkv, stride, 1, t * stride + v_col, v_width, &want_v);
    ASSERT_LT(RelativeError(slot_k, want_k), KernelTolerance<T>()) << what << ", token " << t;
    ASSERT_EQ(slot_v, want_v) << what << ", token " << t << ": v not copied exactly";
  }
  for (int64_t slot = 0; slot < num_slots; ++slot) {
    if (owned[slot]) continue;
    for (int64_t i = 0; i < k_width; ++i) {
      ASSERT_TRUE(std::isnan(got_k[slot * k_width + i])) << what << ": slot " << slot << " written";
    }
    for (int64_t i = 0; i < v_width; ++i) {
      ASSERT_TRUE(std::isnan(got_v[slot * v_width + i])) << what << ": slot " << slot << " written";
    }
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

TYPED_TEST(RopeCudaTest, WritesRotatedKeysAndValuesIntoTheirCacheSlots) {
  TPSERVE_SKIP_WITHOUT_CUDA();
  uint32_t seed = 7;
  int scaling = 0, i = 0;
  for (const RopeCase& c : kCases) {
    if (c.num_kv_heads == 0) continue;
    // v heads as wide as k heads (every model here), and half as wide (narrower rows,
    // the vector width chosen for both).
    const int dv = i++ % 2 == 0 ? c.head_dim : c.head_dim / 2;
    for (Norm norm : {Norm::kNone, Norm::kQAndK}) {
      CheckRopeWriteKv<TypeParam>(c, dv, kScalings[scaling++ % 3], norm, seed += 10);
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

  const int32_t one_position = 0;
  int64_t one_slot = 0;
  float k[16], v[16];
  RopeCacheWrite<float> cache;
  cache.slots = &one_slot, cache.k_cache = k, cache.v_cache = v;
  cache.v_col = 48, cache.v_head_dim = 8;
  auto fused = [&](int64_t stride, int nkv, const RopeCacheWrite<float>& c) {
    return LaunchRopeWriteKv<float>(qkv, stride, &one_position, 1, 4, nkv, 8, table, nullptr,
                                    nullptr, kEps, c, nullptr);
  };
  EXPECT_EQ(fused(63, 2, cache), cudaErrorInvalidValue);  // row shorter than q + k + v
  EXPECT_EQ(fused(64, 0, cache), cudaErrorInvalidValue);  // no kv heads
  RopeCacheWrite<float> bad = cache;
  bad.v_head_dim = 0;
  EXPECT_EQ(fused(64, 2, bad), cudaErrorInvalidValue);
  bad = cache, bad.v_col = -1;
  EXPECT_EQ(fused(64, 2, bad), cudaErrorInvalidValue);
  bad = cache, bad.v_cache = nullptr;
  EXPECT_EQ(fused(64, 2, bad), cudaErrorInvalidValue);
  bad = cache, bad.slots = nullptr;
  EXPECT_EQ(fused(64, 2, bad), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace tpserve
