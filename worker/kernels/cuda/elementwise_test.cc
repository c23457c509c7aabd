// The elementwise and data-movement kernels on the GPU against plain references, in both
// dtypes, with guard regions around every output. Adds (one fp32 add rounded to T),
// conversions (round to nearest even) and copies are exactly defined, so the results
// must match bit for bit. Tagged "gpu"; skips when no CUDA device is present.
#include "worker/kernels/cuda/elementwise.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "worker/cuda/cuda_test_util.h"

namespace tpserve {
namespace {

// Past 8192 blocks × 256 threads × 8 elements: the flat kernels' grid-stride loop.
constexpr int64_t kStridedCount = 17'000'003;

// A device copy of `host` starting one element into its allocation: not 16-byte aligned,
// which forces the scalar path.
template <typename T>
struct Misaligned {
  explicit Misaligned(std::vector<float> host)
      : array([&] {
          host.insert(host.begin(), 0.0f);
          return host;
        }()) {}
  T* get() const { return array.get() + 1; }
  DeviceArray<T> array;
};

template <typename T>
class ElementwiseCudaTest : public ::testing::Test {};
using KernelTypes = ::testing::Types<float, __nv_bfloat16>;
TYPED_TEST_SUITE(ElementwiseCudaTest, KernelTypes);

TYPED_TEST(ElementwiseCudaTest, AddBias) {
  using T = TypeParam;
  TPSERVE_SKIP_WITHOUT_CUDA();
  const std::pair<int64_t, int64_t> shapes[] = {{1, 1},  {2, 4},   {5, 8},    {3, 16},
                                                {4, 48}, {7, 129}, {2, 3001}, {333, 4096}};
  uint32_t seed = 1;
  for (auto [n, m] : shapes) {
    const auto y = RoundTo<T>(RandomVector(n * m, seed++));
    const auto bias = RoundTo<T>(RandomVector(m, seed++));
    std::vector<float> want(y.size());
    for (int64_t i = 0; i < n * m; ++i) want[i] = y[i] + bias[i % m];
    GuardedOutput<T> d_y(y.size());
    d_y.Fill(y);
    const DeviceArray<T> d_bias(bias);
    TPSERVE_ASSERT_CUDA(LaunchAddBias(d_y.get(), d_bias.get(), n, m, nullptr));
    TPSERVE_ASSERT_CUDA(cudaDeviceSynchronize());
    EXPECT_EQ(d_y.ToHostCheckingGuards(), RoundTo<T>(want)) << n << "x" << m;
  }
}

TYPED_TEST(ElementwiseCudaTest, Add) {
  using T = TypeParam;
  TPSERVE_SKIP_WITHOUT_CUDA();
  enum class X { kAligned, kMisaligned, kAliasesY };
  uint32_t seed = 100;
  for (int64_t count : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{129}, int64_t{4096},
                        int64_t{333 * 4096 + 3}, kStridedCount}) {
    for (X x_kind : {X::kAligned, X::kMisaligned, X::kAliasesY}) {
      const auto y = RoundTo<T>(RandomVector(count, seed++));
      const auto x = x_kind == X::kAliasesY ? y : RoundTo<T>(RandomVector(count, seed++));
      std::vector<float> want(count);
      for (int64_t i = 0; i < count; ++i) want[i] = y[i] + x[i];
      GuardedOutput<T> d_y(count);
      d_y.Fill(y);
      const DeviceArray<T> aligned(x_kind == X::kAligned ? x : std::vector<float>{});
      const Misaligned<T> misaligned(x_kind == X::kMisaligned ? x : std::vector<float>{});
      const T* d_x = x_kind == X::kAligned      ? aligned.get()
                     : x_kind == X::kMisaligned ? misaligned.get()
                                                : d_y.get();
      TPSERVE_ASSERT_CUDA(LaunchAdd(d_y.get(), d_x, count, nullptr));
      TPSERVE_ASSERT_CUDA(cudaDeviceSynchronize());
      EXPECT_EQ(d_y.ToHostCheckingGuards(), RoundTo<T>(want))
          << count << " elements, x kind " << static_cast<int>(x_kind);
    }
  }
}

TYPED_TEST(ElementwiseCudaTest, GatherRows) {
  using T = TypeParam;
  TPSERVE_SKIP_WITHOUT_CUDA();
  struct Case {
    int32_t x_rows;
    int64_t num_rows, dim;
  };
  const Case cases[] = {{1, 1, 1},    {10, 7, 4},      {9, 2, 16},    {5, 5, 8},
                        {50, 3, 129}, {1000, 333, 48}, {64, 17, 4096}};
  uint32_t seed = 200;
  for (const Case& c : cases) {
    const auto x = RoundTo<T>(RandomVector(c.x_rows * c.dim, seed++));
    std::mt19937 rng(seed++);
    std::uniform_int_distribution<int32_t> pick(0, c.x_rows - 1);
    std::vector<int32_t> rows(c.num_rows);
    for (int32_t& r : rows) r = pick(rng);  // repeats allowed
    rows.front() = c.x_rows - 1;
    rows.back() = 0;
    std::vector<float> want;
    for (int32_t r : rows)
      want.insert(want.end(), x.begin() + r * c.dim, x.begin() + (r + 1) * c.dim);

    const DeviceArray<T> d_x(x);
    const auto d_rows = DeviceArray<int32_t>::FromRaw(rows);
    GuardedOutput<T> out(c.num_rows * c.dim);
    TPSERVE_ASSERT_CUDA(
        LaunchGatherRows(d_x.get(), d_rows.get(), c.num_rows, c.dim, out.get(), nullptr));
    TPSERVE_ASSERT_CUDA(cudaDeviceSynchronize());
    EXPECT_EQ(out.ToHostCheckingGuards(), want) << c.num_rows << " rows of " << c.dim;
  }
}

TYPED_TEST(ElementwiseCudaTest, UngatherVocabDropsPaddedColumns) {
  using T = TypeParam;
  TPSERVE_SKIP_WITHOUT_CUDA();
  struct Case {
    int tp;
    int64_t n, vocab, cols;
  };
  // Vector path where cols and vocab are multiples of 8 (with and without padding: 4·256
  // over a vocab of 1000), scalar otherwise; real Llama 3 and Qwen vocabs over 8 ranks.
  const Case cases[] = {{1, 1, 1, 1},        {2, 3, 1000, 500},     {4, 5, 1003, 251},
                        {8, 17, 1000, 125},  {4, 3, 1000, 256},     {8, 2, 4096, 512},
                        {4, 2, 32001, 8001}, {8, 2, 128256, 16032}, {8, 3, 151936, 18992}};
  uint32_t seed = 300;
  for (const Case& c : cases) {
    const auto gathered = RoundTo<T>(RandomVector(c.tp * c.n * c.cols, seed++));
    std::vector<float> want(c.n * c.vocab);
    for (int64_t i = 0; i < c.n; ++i) {
      for (int64_t j = 0; j < c.vocab; ++j) {
        want[i * c.vocab + j] = gathered[((j / c.cols) * c.n + i) * c.cols + j % c.cols];
      }
    }
    const DeviceArray<T> d_gathered(gathered);
    GuardedOutput<float> logits(c.n * c.vocab);
    TPSERVE_ASSERT_CUDA(
        LaunchUngatherVocab(d_gathered.get(), c.tp, c.n, c.cols, c.vocab, logits.get(), nullptr));
    TPSERVE_ASSERT_CUDA(cudaDeviceSynchronize());
    EXPECT_EQ(logits.ToHostCheckingGuards(), want)
        << "tp " << c.tp << ", n " << c.n << ", vocab " << c.vocab << ", cols " << c.cols;
  }
}

// The bits of bf16(f), rounded to nearest even, as a float (f finite or infinite).
float RoundToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  std::memcpy(&f, &u, 4);
  return f;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Random values of several magnitudes plus ties (both parities), ±0, ±inf, the largest
// float (rounds to inf) and tiny normals.
std::vector<float> ConvertInputs(int64_t count, uint32_t seed) {
  std::vector<float> v = {FromBits(0x3F808000u),
                          FromBits(0x3F818000u),
                          FromBits(0xBF808000u),
                          FromBits(0x3F80FFFFu),
                          FromBits(0x3F807FFFu),
                          0.0f,
                          -0.0f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::max(),
                          1e-30f,
                          -3e-35f};
  const auto random = RandomVector(count, seed, 100.0f);
  for (size_t i = 0; v.size() < static_cast<size_t>(count); ++i) {
    v.push_back(random[i] * std::pow(10.0f, static_cast<float>(i % 13) - 6.0f));
  }
  v.resize(count);
  return v;
}

// The bits of each value (so that −0 and +0 differ).
std::vector<uint32_t> Bits(const std::vector<float>& v) {
  std::vector<uint32_t> bits(v.size());
  std::memcpy(bits.data(), v.data(), v.size() * 4);
  return bits;
}

template <typename Src, typename Dst>
void CheckConvert(const std::vector<float>& in, bool misaligned, const std::vector<float>& want) {
  const DeviceArray<Src> aligned(misaligned ? std::vector<float>{} : in);
  const Misaligned<Src> offset(misaligned ? in : std::vector<float>{});
  GuardedOutput<Dst> out(in.size());
  TPSERVE_ASSERT_CUDA(LaunchConvert(misaligned ? offset.get() : aligned.get(),
                                    static_cast<int64_t>(in.size()), out.get(), nullptr));
  TPSERVE_ASSERT_CUDA(cudaDeviceSynchronize());
  EXPECT_EQ(Bits(out.ToHostCheckingGuards()), Bits(want))
      << in.size() << " elements" << (misaligned ? ", misaligned" : "");
}

TEST(ConvertCudaTest, RoundsToNearestEvenAndCopiesExactly) {
  TPSERVE_SKIP_WITHOUT_CUDA();
  uint32_t seed = 400;
  for (int64_t count :
       {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{12}, int64_t{4101}, kStridedCount}) {
    for (bool misaligned : {false, true}) {
      const auto in = ConvertInputs(count, seed++);
      std::vector<float> rounded(in.size());
      for (size_t i = 0; i < in.size(); ++i) rounded[i] = RoundToBf16(in[i]);
      CheckConvert<float, __nv_bfloat16>(in, misaligned, rounded);
      CheckConvert<__nv_bfloat16, float>(rounded, misaligned, rounded);
      CheckConvert<float, float>(in, misaligned, in);
      CheckConvert<__nv_bfloat16, __nv_bfloat16>(rounded, misaligned, rounded);
    }
  }
}

// Size checks happen before any CUDA call, so this runs without a device too.
TEST(ElementwiseLaunchTest, RejectsInvalidSizesAndLaunchesNothingWhenEmpty) {
  float* f = nullptr;
  __nv_bfloat16* b = nullptr;
  const int32_t* rows = nullptr;
  EXPECT_EQ(LaunchAddBias<float>(f, f, -1, 4, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(LaunchAddBias<float>(f, f, 0, 4, nullptr), cudaSuccess);
  EXPECT_EQ(LaunchAdd<float>(f, f, -1, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(LaunchAdd<float>(f, f, 0, nullptr), cudaSuccess);
  EXPECT_EQ(LaunchGatherRows<float>(f, rows, 2, -1, f, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(LaunchGatherRows<float>(f, rows, 0, 8, f, nullptr), cudaSuccess);
  EXPECT_EQ((LaunchConvert<float, __nv_bfloat16>(f, -1, b, nullptr)), cudaErrorInvalidValue);
  EXPECT_EQ((LaunchConvert<__nv_bfloat16, float>(b, 0, f, nullptr)), cudaSuccess);
  EXPECT_EQ(LaunchUngatherVocab<float>(f, 0, 2, 8, 8, f, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(LaunchUngatherVocab<float>(f, 2, 2, 8, 17, f, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(LaunchUngatherVocab<float>(f, 2, -1, 8, 16, f, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(LaunchUngatherVocab<float>(f, 2, 0, 8, 16, f, nullptr), cudaSuccess);
}

}  // namespace
}  // namespace tpserve
