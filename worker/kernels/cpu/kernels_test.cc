// Tests of the CPU block kernels against direct double-precision formulas.
#include <algorithm>
#include <cmath>
#include <functional>
#include <utility>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/dtype.h"
#include "worker/kernels/cpu/attention_amx.h"
#include "worker/kernels/cpu/attention_avx2.h"
#include "worker/kernels/cpu/cpu_threads.h"
#include "worker/kernels/cpu/gemm.h"
#include "worker/kernels/cpu/norm_activation.h"
#include "worker/kernels/cpu/paged_attention.h"
#include "worker/kernels/cpu/rope.h"

namespace tpserve {
namespace {

std::vector<float> Random(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

TEST(NormActivationTest, RmsNormAndFusedResidual) {
  // 10: scalar only; 37: a 16-wide step, an 8-wide one and a tail; 2048: a model's.
  for (int dim : {10, 37, 2048}) {
    const int n = 3;
    auto x = Random(n * dim, 1), w = Random(dim, 2);
    std::vector<float> out(n * dim);
    RmsNorm(x.data(), w.data(), n, dim, 1e-5f, out.data());
    for (int i = 0; i < n; ++i) {
      double ss = 0;
      for (int j = 0; j < dim; ++j) ss += double(x[i * dim + j]) * x[i * dim + j];
      const double inv = 1.0 / std::sqrt(ss / dim + 1e-5);
      for (int j = 0; j < dim; ++j) {
        EXPECT_NEAR(out[i * dim + j], w[j] * x[i * dim + j] * inv, 1e-5 * (1 + std::abs(w[j])))
            << dim;
      }
      // A row's result does not depend on the rows around it.
      std::vector<float> alone(dim);
      RmsNorm(x.data() + i * dim, w.data(), 1, dim, 1e-5f, alone.data());
      EXPECT_EQ(alone, std::vector<float>(out.begin() + i * dim, out.begin() + (i + 1) * dim));
    }
  }
  const int n = 3, dim = 10;
  auto x = Random(n * dim, 1), w = Random(dim, 2), res = Random(n * dim, 3);
  std::vector<float> res2 = res, fused(n * dim), sum(n * dim), want(n * dim);
  AddRmsNorm(res2.data(), x.data(), w.data(), n, dim, 1e-5f, fused.data());
  for (int i = 0; i < n * dim; ++i) sum[i] = res[i] + x[i];
  RmsNorm(sum.data(), w.data(), n, dim, 1e-5f, want.data());
  EXPECT_EQ(res2, sum);
  EXPECT_EQ(fused, want);
}

// Each activation against its definition in transformers' ACT2FN, evaluated in double.
TEST(NormActivationTest, ActMulMatchesEachActivationsDefinition) {
  const struct {
    Activation act;
    double (*reference)(double);
  } cases[] = {
      {Activation::kSilu, [](double g) { return g / (1 + std::exp(-g)); }},
      {Activation::kGelu, [](double g) { return 0.5 * g * (1 + std::erf(g / std::sqrt(2.0))); }},
      {Activation::kGeluTanh,
       [](double g) {
         return 0.5 * g * (1 + std::tanh(std::sqrt(2 / 3.14159265358979323846) *
                                         (g + 0.044715 * g * g * g)));
       }},
      {Activation::kRelu, [](double g) { return g > 0 ? g : 0.0; }},
  };
  auto gu = Random(3 * 16, 4);
  for (float& v : gu) v *= 4;  // well into both tails
  for (const auto& c : cases) {
    std::vector<float> out(3 * 8);
    ActMul(c.act, gu.data(), 3, 8, out.data());
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 8; ++j) {
        const double g = gu[i * 16 + j], u = gu[i * 16 + 8 + j];
        EXPECT_NEAR(out[i * 8 + j], c.reference(g) * u, 1e-5 * (1 + std::abs(g * u)))
            << static_cast<int>(c.act) << " g=" << g;
      }
    }
  }
  // SiLU runs eight lanes at a time with its own e^x: a width that is not a multiple of
  // 8 (the tail takes the scalar path), and values past where e^−g saturates.
  const int width = 29;
  auto wide = Random(2 * width, 6);
  for (float& v : wide) v *= 6;
  const float extremes[] = {88.0f, -88.0f, 95.0f, -95.0f, 1e30f, -1e30f, 0.0f, -0.0f, 1e-30f};
  for (int j = 0; j < 9; ++j) wide[j] = extremes[j];
  std::vector<float> silu(width);
  ActMul(Activation::kSilu, wide.data(), 1, width, silu.data());
  for (int j = 0; j < width; ++j) {
    const double g = wide[j], u = wide[width + j];
    const double want = (g < -700 ? 0.0 : g / (1 + std::exp(-g))) * u;
    EXPECT_NEAR(silu[j], want, 1e-5 * (1 + std::abs(want))) << "g=" << g;
  }
  wide[3] = std::nanf("");
  ActMul(Activation::kSilu, wide.data(), 1, width, silu.data());
  EXPECT_TRUE(std::isnan(silu[3]));
  // The tanh form is not erf's: at g = 1 they differ by ~1.6e-4, more than float error.
  std::vector<float> one = {1.0f, 1.0f}, erf_out(1), tanh_out(1);
  ActMul(Activation::kGelu, one.data(), 1, 1, erf_out.data());
  ActMul(Activation::kGeluTanh, one.data(), 1, 1, tanh_out.data());
  EXPECT_GT(std::abs(erf_out[0] - tanh_out[0]), 1e-4);
}

TEST(RopeTest, RotatesHalvesByPositionTimesFrequency) {
  const int d = 8;
  RotaryEmbedding rope(d, 10000.0, RopeScaling{});
  auto x = Random(2 * 3 * d, 5);  // [2 tokens, 3 heads, 8]
  auto y = x;
  const std::vector<int32_t> pos = {0, 7};
  rope.Apply(pos, 3, y.data());
  for (int t = 0; t < 2; ++t) {
    for (int h = 0; h < 3; ++h) {
      const float* a = &x[(t * 3 + h) * d];
      const float* b = &y[(t * 3 + h) * d];
      for (int i = 0; i < d / 2; ++i) {
        const double f = 1.0 / std::pow(10000.0, 2.0 * i / d), ang = pos[t] * f;
        EXPECT_NEAR(b[i], a[i] * std::cos(ang) - a[i + d / 2] * std::sin(ang), 1e-5);
        EXPECT_NEAR(b[i + d / 2], a[i + d / 2] * std::cos(ang) + a[i] * std::sin(ang), 1e-5);
      }
    }
  }
}

TEST(RopeTest, ScalingVariants) {
  RopeScaling linear{RopeScaling::Type::kLinear, 2.0};
  RotaryEmbedding plain(32, 500000.0, RopeScaling{}), scaled(32, 500000.0, linear);
  for (int i = 0; i < 16; ++i) EXPECT_DOUBLE_EQ(scaled.inv_freq()[i], plain.inv_freq()[i] / 2);
  RopeScaling l3{RopeScaling::Type::kLlama3, 8.0, 1.0, 4.0, 64};
  RotaryEmbedding llama3(32, 500000.0, l3);
  int kept = 0, divided = 0, blended = 0;
  for (int i = 0; i < 16; ++i) {
    const double f = plain.inv_freq()[i], g = llama3.inv_freq()[i];
    const double wavelen = 2 * M_PI / f;
    if (wavelen < 64.0 / 4.0) {
      EXPECT_DOUBLE_EQ(g, f);
      ++kept;
    } else if (wavelen > 64.0) {
      EXPECT_DOUBLE_EQ(g, f / 8);
      ++divided;
    } else {
      EXPECT_GT(g, f / 8);
      EXPECT_LT(g, f);
      ++blended;
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(blended, 0);
}

// The CUDA rope kernel rotates with CosSinTable, so the table must reproduce Apply
// exactly, for every scaling.
TEST(RopeTest, CosSinTableRotatesBitForBitAsApply) {
  const int d = 16, heads = 3, max_positions = 300;
  const std::vector<int32_t> pos = {0, 1, 17, 299, 299, 128};
  const RopeScaling scalings[] = {RopeScaling{},
                                  {RopeScaling::Type::kLinear, 4.0},
                                  {RopeScaling::Type::kLlama3, 8.0, 1.0, 4.0, 32}};
  for (const RopeScaling& scaling : scalings) {
    const RotaryEmbedding rope(d, 10000.0, scaling);
    const std::vector<float> table = rope.CosSinTable(max_positions);
    ASSERT_EQ(table.size(), size_t{max_positions} * d);
    for (int i = 0; i < d; ++i) EXPECT_EQ(table[i], i < d / 2 ? 1.0f : 0.0f);  // position 0
    auto x = Random(pos.size() * heads * d, 9);
    auto want = x;
    rope.Apply(pos, heads, want.data());
    for (size_t t = 0; t < pos.size(); ++t) {
      const float* cos_row = &table[pos[t] * d];
      const float* sin_row = cos_row + d / 2;
      for (int h = 0; h < heads; ++h) {
        float* v = &x[(t * heads + h) * d];
        for (int i = 0; i < d / 2; ++i) {
          const float a = v[i], b = v[i + d / 2];
          v[i] = a * cos_row[i] - b * sin_row[i];
          v[i + d / 2] = b * cos_row[i] + a * sin_row[i];
        }
      }
    }
    EXPECT_EQ(x, want) << "scaling type " << static_cast<int>(scaling.type);
  }
}

// Dense causal attention of one sequence, straight from the definition (values dv wide,
// d when 0).
std::vector<float> DenseAttention(const std::vector<float>& q, const std::vector<float>& k,
                                  const std::vector<float>& v, int len, int nq, int nkv, int d,
                                  int window, int dv = 0) {
  if (dv == 0) dv = d;
  std::vector<float> out(len * nq * dv, 0.0f);
  for (int t = 0; t < len; ++t) {
    for (int h = 0; h < nq; ++h) {
      const int kh = h / (nq / nkv);
      std::vector<double> s;
      const int lo = window > 0 ? std::max(0, t - window + 1) : 0;
      double mx = -1e300, den = 0;
      for (int j = lo; j <= t; ++j) {
        double dot = 0;
        for (int e = 0; e < d; ++e) dot += double(q[(t * nq + h) * d + e]) * k[(j * nkv + kh) * d + e];
        s.push_back(dot / std::sqrt(double(d)));
        mx = std::max(mx, s.back());
      }
      for (double& x : s) den += (x = std::exp(x - mx));
      for (int j = lo; j <= t; ++j) {
        for (int e = 0; e < dv; ++e) {
          out[(t * nq + h) * dv + e] += s[j - lo] / den * v[(j * nkv + kh) * dv + e];
        }
      }
    }
  }
  return out;
}

TEST(PagedAttentionTest, ChunkedPrefillAndDecodeMatchDense) {
  const int len = 11, nq = 4, nkv = 2, d = 8;
  for (int window : {0, 4}) {
    auto q = Random(len * nq * d, 6), k = Random(len * nkv * d, 7), v = Random(len * nkv * d, 8);
    const auto want = DenseAttention(q, k, v, len, nq, nkv, d, window);
    auto cache = KvCache::Create({1, 8, 4, nkv, d, d}, 1 << 20);
    ASSERT_TRUE(cache.ok());
    const std::vector<int32_t> table = {5, 2, 7};  // non-contiguous blocks
    AttentionParams p{nq, nkv, d, d, 1.0f / std::sqrt(float(d)), window};
    std::vector<float> got(len * nq * d);
    // Prefill 6 tokens, then a chunk of 3, then 2 single-token decode steps.
    int done = 0;
    for (int chunk : {6, 3, 1, 1}) {
      StepBatch batch;
      batch.token_ids.assign(chunk, 0);
      batch.seqs.push_back({chunk, done + chunk, table, true});
      const auto slots = batch.Slots(4);
      WriteKv(&k[done * nkv * d], &v[done * nkv * d], slots, 0, *cache);
      PagedAttention(&q[done * nq * d], batch, *cache, 0, p, &got[done * nq * d]);
      done += chunk;
    }
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << window;
  }
}

// A batch mixing a long prefill (several query chunks) with a decode at a long context,
// in separate block tables, GQA with 8 query heads per kv head, with and without a window.
// The same over a bf16 cache (keys and values rounded when written) within bf16's error.
class PagedAttentionCacheTest : public ::testing::TestWithParam<int> {};

TEST_P(PagedAttentionCacheTest, MixedBatchOfLongSequencesMatchesDense) {
  const int nq = 16, nkv = 2, d = 64, block = 16;
  const int len_a = 300, len_b = 201;  // a: prefilled in the mixed step; b: decodes its last
  const int bytes_per_element = GetParam();
  const double tol = bytes_per_element == 4 ? 2e-5 : 2e-2;
  for (int window : {0, 50}) {
    auto qa = Random(len_a * nq * d, 11), ka = Random(len_a * nkv * d, 12),
         va = Random(len_a * nkv * d, 13);
    auto qb = Random(len_b * nq * d, 14), kb = Random(len_b * nkv * d, 15),
         vb = Random(len_b * nkv * d, 16);
    const auto want_a = DenseAttention(qa, ka, va, len_a, nq, nkv, d, window);
    const auto want_b = DenseAttention(qb, kb, vb, len_b, nq, nkv, d, window);
    auto cache = KvCache::Create({1, 40, block, nkv, d, d, bytes_per_element}, 1 << 26);
    ASSERT_TRUE(cache.ok());
    std::vector<int32_t> table_a, table_b;
    for (int b = 0; b < 19; ++b) table_a.push_back(2 * b + 1);  // interleaved blocks
    for (int b = 0; b < 13; ++b) table_b.push_back(2 * b);
    AttentionParams p{nq, nkv, d, d, 1.0f / std::sqrt(float(d)), window};
    // b's first 200 tokens on their own.
    StepBatch first;
    first.token_ids.assign(len_b - 1, 0);
    first.seqs.push_back({len_b - 1, len_b - 1, table_b, true});
    WriteKv(kb.data(), vb.data(), first.Slots(block), 0, *cache);
    std::vector<float> scratch((len_b - 1) * nq * d);
    PagedAttention(qb.data(), first, *cache, 0, p, scratch.data());
    // Then a's whole prompt and b's last token in one step: q rows a then b.
    StepBatch mixed;
    mixed.token_ids.assign(len_a + 1, 0);
    mixed.seqs.push_back({len_a, len_a, table_a, true});
    mixed.seqs.push_back({1, len_b, table_b, false});
    std::vector<float> k((len_a + 1) * nkv * d), v(k.size()), q((len_a + 1) * nq * d);
    std::copy(ka.begin(), ka.end(), k.begin());
    std::copy(kb.end() - nkv * d, kb.end(), k.begin() + len_a * nkv * d);
    std::copy(va.begin(), va.end(), v.begin());
    std::copy(vb.end() - nkv * d, vb.end(), v.begin() + len_a * nkv * d);
    std::copy(qa.begin(), qa.end(), q.begin());
    std::copy(qb.end() - nq * d, qb.end(), q.begin() + len_a * nq * d);
    WriteKv(k.data(), v.data(), mixed.Slots(block), 0, *cache);
    std::vector<float> got(q.size());
    PagedAttention(q.data(), mixed, *cache, 0, p, got.data());
    for (int i = 0; i < len_a * nq * d; ++i) {
      ASSERT_NEAR(got[i], want_a[i], tol) << "a, window " << window << ", index " << i;
    }
    for (int i = 0; i < nq * d; ++i) {
      ASSERT_NEAR(got[len_a * nq * d + i], want_b[(len_b - 1) * nq * d + i], tol)
          << "b, window " << window << ", index " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fp32AndBf16, PagedAttentionCacheTest, ::testing::Values(4, 2));

// Softmax weights far apart (scores spanning ±80) still match the definition: the
// vectorised exp is accurate across the range, and tiny weights underflow to 0 cleanly.
TEST(PagedAttentionTest, WideScoreRangeMatchesDense) {
  const int len = 37, nq = 2, nkv = 1, d = 8;
  auto q = Random(len * nq * d, 21), k = Random(len * nkv * d, 22), v = Random(len * nkv * d, 23);
  for (float& x : q) x *= 40.0f;  // scores of tens
  const auto want = DenseAttention(q, k, v, len, nq, nkv, d, 0);
  auto cache = KvCache::Create({1, 4, 16, nkv, d, d}, 1 << 20);
  ASSERT_TRUE(cache.ok());
  StepBatch batch;
  batch.token_ids.assign(len, 0);
  batch.seqs.push_back({len, len, {3, 0, 1}, true});
  WriteKv(k.data(), v.data(), batch.Slots(16), 0, *cache);
  AttentionParams p{nq, nkv, d, d, 1.0f / std::sqrt(float(d)), 0};
  std::vector<float> got(len * nq * d);
  PagedAttention(q.data(), batch, *cache, 0, p, got.data());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5) << i;
}

// The AMX kernel (bf16 cache) against the definition across the shapes models use: GQA
// groups from 1 to 32 query heads a kv head (a 16-row tile holding part of a token's heads,
// one token's, or several tokens'), head sizes that are not multiples of a tile's 32
// columns, values narrower than keys, windows, and prompts spanning many 64-position
// blocks; each prefilled in three chunks and then decoded a token at a time. The same
// shapes through PagedAttentionSgemm (the path without AMX) must agree as closely.
struct AttentionShape {
  int nq, nkv, d, dv, window, len;
};

TEST(PagedAttentionTest, Bf16CacheMatchesDenseAcrossShapes) {
  const AttentionShape shapes[] = {{32, 4, 64, 64, 0, 200},  {16, 8, 128, 128, 0, 150},
                                   {8, 1, 80, 80, 0, 130},   {32, 1, 64, 64, 0, 70},
                                   {4, 4, 64, 64, 37, 300},  {6, 2, 96, 48, 0, 90},
                                   {2, 1, 8, 8, 5, 40}};
  for (int block : {16, 8, 32, 5}) {  // cache blocks smaller and larger than a 16-row tile
    for (const AttentionShape& a : shapes) {
      SCOPED_TRACE(testing::Message() << "nq " << a.nq << " nkv " << a.nkv << " d " << a.d
                                      << " dv " << a.dv << " window " << a.window << " block "
                                      << block);
      auto q = Random(a.len * a.nq * a.d, 31), k = Random(a.len * a.nkv * a.d, 32),
           v = Random(a.len * a.nkv * a.dv, 33);
      const auto want = DenseAttention(q, k, v, a.len, a.nq, a.nkv, a.d, a.window, a.dv);
      const int blocks = (a.len + block - 1) / block;
      auto cache = KvCache::Create({1, blocks + 3, block, a.nkv, a.d, a.dv, 2}, 1 << 26);
      ASSERT_TRUE(cache.ok());
      std::vector<int32_t> table;
      for (int b = 0; b < blocks; ++b) table.push_back(blocks - 1 - b + 3);  // reversed
      AttentionParams p{a.nq, a.nkv, a.d, a.dv, 1.0f / std::sqrt(float(a.d)), a.window};
      std::vector<float> got(a.len * a.nq * a.dv), sgemm(got.size()), avx2(got.size());
      const bool with_avx2 = attention_avx2::Available();
      const int third = a.len / 3;
      std::vector<int> chunks = {third, a.len - 2 * third - 4, third};
      for (int i = 0; i < 4; ++i) chunks.push_back(1);
      int done = 0;
      for (int chunk : chunks) {
        StepBatch batch;
        batch.token_ids.assign(chunk, 0);
        batch.seqs.push_back({chunk, done + chunk, table, true});
        WriteKv(&k[done * a.nkv * a.d], &v[done * a.nkv * a.dv], batch.Slots(block), 0, *cache);
        PagedAttention(&q[done * a.nq * a.d], batch, *cache, 0, p, &got[done * a.nq * a.dv]);
        PagedAttentionSgemm(&q[done * a.nq * a.d], batch, *cache, 0, p,
                            &sgemm[done * a.nq * a.dv]);
        if (with_avx2) {
          PagedAttentionAvx2(&q[done * a.nq * a.d], batch, *cache, 0, p,
                             &avx2[done * a.nq * a.dv]);
        }
        done += chunk;
      }
      ASSERT_EQ(done, a.len);
      double worst = 0, worst_sgemm = 0, avx2_from_sgemm = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        worst = std::max(worst, std::abs(double(got[i]) - want[i]));
        worst_sgemm = std::max(worst_sgemm, std::abs(double(sgemm[i]) - want[i]));
        avx2_from_sgemm = std::max(avx2_from_sgemm, std::abs(double(avx2[i]) - sgemm[i]));
      }
      // Keys and values in bf16 (every path), q and the weights too on AMX: a few units of
      // bf16's 2^-8 on outputs of order 1. The AVX2 kernel and the sgemm path both work in
      // fp32 on the same widened keys and values: they differ by rounding order alone.
      EXPECT_LT(worst, 2e-2);
      EXPECT_LT(worst_sgemm, 2e-2);
      if (with_avx2) { EXPECT_LT(avx2_from_sgemm, 1e-5); }
    }
  }
}

using AttentionFn = void (*)(const float*, const StepBatch&, const KvCache&, int,
                             const AttentionParams&, float*);

// The bf16-cache kernels this CPU runs whose rows must not depend on their batch: the AMX
// tile kernel (through PagedAttention) and the AVX2 one, each where the CPU has it.
std::vector<std::pair<std::string, AttentionFn>> BatchIndependentKernels() {
  std::vector<std::pair<std::string, AttentionFn>> kernels;
  if (attention_amx::Available()) kernels.emplace_back("AMX", &PagedAttention);
  if (attention_avx2::Available()) kernels.emplace_back("AVX2", &PagedAttentionAvx2);
  return kernels;
}

// With the AMX or the AVX2 kernel, a query row's bits depend on nothing but its own q,
// position and the cache: the same prompt prefilled whole, in uneven chunks beside another
// sequence, or decoded a token at a time gives identical outputs at every position. GQA
// groups of 8 (a tile's rows one token's heads), of 1 (a tile's rows several tokens'), of
// 3 (the AVX2 decode scoring two positions a pass, a short last one) and of 16 (two
// scoring passes a token).
TEST(PagedAttentionTest, Bf16RowsDoNotDependOnChunkingOrBatch) {
  const auto kernels = BatchIndependentKernels();
  if (kernels.empty()) GTEST_SKIP() << "neither AMX nor AVX2 on this CPU";
  for (const auto& [kernel, attend] : kernels) {
    for (const auto& [nq, nkv] :
         {std::pair{32, 4}, std::pair{4, 4}, std::pair{12, 4}, std::pair{32, 2}}) {
      const int d = 64, block = 16, len = 150;
      for (int window : {0, 40}) {
        SCOPED_TRACE(testing::Message() << kernel << ", " << nq << "/" << nkv << " heads, window "
                                        << window);
        auto q = Random(len * nq * d, 41), k = Random(len * nkv * d, 42),
             v = Random(len * nkv * d, 43);
        auto other_q = Random(70 * nq * d, 44), other_k = Random(70 * nkv * d, 45),
             other_v = Random(70 * nkv * d, 46);
        AttentionParams p{nq, nkv, d, d, 0.125f, window};
        std::vector<int32_t> table, other_table;
        for (int b = 0; b < 10; ++b) table.push_back(b);
        for (int b = 0; b < 5; ++b) other_table.push_back(10 + b);
        // Run `chunks` of the prompt; with `beside`, each step also carries a 70-token
        // prompt of another sequence (a fresh one every step, its rows after ours).
        auto run = [&](const std::vector<int>& chunks, bool beside) {
          auto cache = KvCache::Create({1, 16, block, nkv, d, d, 2}, 1 << 24);
          EXPECT_TRUE(cache.ok());
          std::vector<float> out(len * nq * d);
          int done = 0;
          for (int chunk : chunks) {
            StepBatch batch;
            batch.token_ids.assign(chunk + (beside ? 70 : 0), 0);
            batch.seqs.push_back({chunk, done + chunk, table, true});
            if (beside) batch.seqs.push_back({70, 70, other_table, true});
            std::vector<float> step_q(&q[done * nq * d], &q[(done + chunk) * nq * d]);
            std::vector<float> step_k(&k[done * nkv * d], &k[(done + chunk) * nkv * d]);
            std::vector<float> step_v(&v[done * nkv * d], &v[(done + chunk) * nkv * d]);
            if (beside) {
              step_q.insert(step_q.end(), other_q.begin(), other_q.end());
              step_k.insert(step_k.end(), other_k.begin(), other_k.end());
              step_v.insert(step_v.end(), other_v.begin(), other_v.end());
            }
            WriteKv(step_k.data(), step_v.data(), batch.Slots(block), 0, *cache);
            std::vector<float> step_out(step_q.size());
            attend(step_q.data(), batch, *cache, 0, p, step_out.data());
            std::copy_n(step_out.begin(), chunk * nq * d, out.begin() + done * nq * d);
            done += chunk;
          }
          return out;
        };
        const std::vector<float> whole = run({len}, false);
        EXPECT_EQ(run({1, 63, 2, 64, 20}, true), whole);
        EXPECT_EQ(run(std::vector<int>(len, 1), false), whole);
      }
    }
  }
}

// A batch of decodes (with enough sequences, each one's kv heads gathered together in one
// pass over its cache rows) and a prompt beside them: every row as the sequence computed
// alone, bit for bit, on one and two threads, for head sizes that fill whole tile rows and
// ones that do not; with the AMX kernel and with the AVX2 one.
TEST(PagedAttentionTest, Bf16DecodeBatchMatchesEachSequenceAlone) {
  const auto kernels = BatchIndependentKernels();
  if (kernels.empty()) GTEST_SKIP() << "neither AMX nor AVX2 on this CPU";
  struct Shape {
    int nq, nkv, d, dv, window;
  };
  for (const auto& [a, block] : {std::pair{Shape{32, 4, 64, 64, 0}, 16},
                                 std::pair{Shape{12, 3, 80, 48, 50}, 16},
                                 std::pair{Shape{32, 4, 64, 64, 0}, 5}}) {
    const int seqs = 9, blocks_each = 300 / block + 1, total = seqs * blocks_each;
    auto cache = KvCache::Create({1, total, block, a.nkv, a.d, a.dv, 2}, 1 << 26);
    ASSERT_TRUE(cache.ok());
    // Block ids spread over the cache out of order, as a busy server leaves them (37 is
    // prime to both totals, 180 and 549).
    std::vector<int32_t> ids(total);
    for (int i = 0; i < total; ++i) ids[i] = (i * 37) % total;
    const int contexts[seqs] = {1, 17, 64, 65, 150, 200, 300, 31, 129};
    const AttentionParams p{a.nq, a.nkv, a.d, a.dv, 0.125f, a.window};
    StepBatch batch;  // a 40-token prompt chunk of sequence 0's table, then the decodes
    std::vector<float> q;
    for (int s = 0; s < seqs; ++s) {
      std::vector<int32_t> table(ids.begin() + s * blocks_each,
                                 ids.begin() + (s + 1) * blocks_each);
      const int len = s == 0 ? 40 : contexts[s];
      StepBatch fill;
      fill.token_ids.assign(len, 0);
      fill.seqs.push_back({len, len, table, true});
      WriteKv(Random(len * a.nkv * a.d, 60 + s).data(), Random(len * a.nkv * a.dv, 80 + s).data(),
              fill.Slots(block), 0, *cache);
      const int new_tokens = s == 0 ? len : 1;
      batch.token_ids.insert(batch.token_ids.end(), new_tokens, 0);
      batch.seqs.push_back({new_tokens, len, table, s == 0});
      const std::vector<float> qs = Random(new_tokens * a.nq * a.d, 100 + s);
      q.insert(q.end(), qs.begin(), qs.end());
    }
    for (const auto& [kernel, attend] : kernels) {
      for (int threads : {1, 2}) {
        SetCpuThreads(threads);
        std::vector<float> together(batch.token_ids.size() * a.nq * a.dv);
        attend(q.data(), batch, *cache, 0, p, together.data());
        int64_t row = 0;  // the sequence's first token in the batch
        for (int s = 0; s < seqs; ++s) {
          const int64_t n = batch.seqs[s].num_new_tokens;
          StepBatch alone;
          alone.token_ids.assign(n, 0);
          alone.seqs.push_back(batch.seqs[s]);
          std::vector<float> got(n * a.nq * a.dv);
          attend(&q[row * a.nq * a.d], alone, *cache, 0, p, got.data());
          EXPECT_EQ(got, std::vector<float>(&together[row * a.nq * a.dv],
                                            &together[(row + n) * a.nq * a.dv]))
              << kernel << ", sequence " << s << ", d " << a.d << ", block " << block << ", "
              << threads << " thread(s)";
          row += n;
        }
      }
    }
    SetCpuThreads(1);
  }
}

// Every slot of layer 0 of `cache` NaN, +inf or -inf, as a stale block could hold.
void PoisonEverySlot(KvCache& cache) {
  const KvCacheShape& shape = cache.shape();
  const int64_t slots = shape.num_slots();
  std::vector<float> k(slots * shape.num_kv_heads * shape.head_dim),
      v(slots * shape.num_kv_heads * shape.v_head_dim);
  const float bad[] = {NAN, INFINITY, -INFINITY};
  for (size_t i = 0; i < k.size(); ++i) k[i] = bad[i % 3];
  for (size_t i = 0; i < v.size(); ++i) v[i] = bad[(i + 1) % 3];
  std::vector<int64_t> all(slots);
  for (int64_t i = 0; i < slots; ++i) all[i] = i;
  WriteKv(k.data(), v.data(), all, 0, cache);
}

// A decode reads its keys straight from the cache (the positions of a 16-row tile in one
// cache block) and takes its blocks together with its values gathered a block at a time;
// a prompt gathers both first. The two give the same bits, for one and two query tiles a
// kv head, windows, and shapes where the decode falls back to the gather (cache blocks of
// 5, d = 80). Slots the sequences do not own hold NaN and infinities, as a stale block
// could: reading a tile's 16 rows takes some of them, and no output may notice.
TEST(PagedAttentionTest, Bf16DecodeKeysFromCacheMatchGatheredAndIgnoreOtherSlots) {
  if (!attention_amx::Available()) GTEST_SKIP() << "no AMX on this CPU";
  struct Shape {
    int nq, nkv, d, dv, window;
  };
  const std::pair<Shape, int> cases[] = {
      {{32, 4, 64, 64, 0}, 16},  {{32, 1, 64, 64, 0}, 16},  // 8 and 32 rows a kv head
      {{16, 8, 128, 128, 0}, 32}, {{8, 2, 64, 32, 37}, 16},  // d 128; a window, dv < d
      {{32, 4, 64, 64, 0}, 5},   {{12, 3, 80, 48, 0}, 16}};  // the gather's cases
  for (const auto& [a, block] : cases) {
    const int seqs = 6, blocks_each = 260 / block + 1, total = seqs * blocks_each + 2;
    auto cache = KvCache::Create({1, total, block, a.nkv, a.d, a.dv, 2}, 1 << 26);
    ASSERT_TRUE(cache.ok());
    PoisonEverySlot(*cache);
    const int contexts[seqs] = {1, 16, 63, 100, 130, 257};
    const AttentionParams p{a.nq, a.nkv, a.d, a.dv, 0.125f, a.window};
    StepBatch batch;
    std::vector<float> q;
    for (int s = 0; s < seqs; ++s) {
      std::vector<int32_t> table;  // every other sequence's blocks reversed
      for (int b = 0; b < blocks_each; ++b) {
        table.push_back(1 + s * blocks_each + (s % 2 ? blocks_each - 1 - b : b));
      }
      const int len = contexts[s];
      StepBatch fill;
      fill.token_ids.assign(len, 0);
      fill.seqs.push_back({len, len, table, true});
      WriteKv(Random(len * a.nkv * a.d, 200 + s).data(),
              Random(len * a.nkv * a.dv, 220 + s).data(), fill.Slots(block), 0, *cache);
      batch.token_ids.push_back(0);
      batch.seqs.push_back({1, len, table, false});
      const std::vector<float> qs = Random(a.nq * a.d, 240 + s);
      q.insert(q.end(), qs.begin(), qs.end());
    }
    for (int threads : {1, 2}) {
      SetCpuThreads(threads);
      std::vector<float> from_cache(seqs * a.nq * a.dv), gathered(from_cache.size());
      PagedAttention(q.data(), batch, *cache, 0, p, from_cache.data());
      attention_amx::SetKeysFromCache(false);
      PagedAttention(q.data(), batch, *cache, 0, p, gathered.data());
      attention_amx::SetKeysFromCache(true);
      const std::string where = testing::PrintToString(a.nq) + "/" +
                                testing::PrintToString(a.nkv) + " heads, d " +
                                testing::PrintToString(a.d) + ", block " +
                                testing::PrintToString(block);
      EXPECT_EQ(from_cache, gathered) << where << ", " << threads << " thread(s)";
      EXPECT_TRUE(std::all_of(from_cache.begin(), from_cache.end(),
                              [](float x) { return std::isfinite(x); }))
          << where;
    }
    SetCpuThreads(1);
  }
}

// The AVX2 kernel reads only positions its rows' windows hold: with every slot the
// sequences do not own NaN or an infinity, a batch of decodes and a prompt chunk with and
// without a window gives finite outputs, those of the sgemm path (which reads the same
// positions, in fp32 too) up to rounding order.
TEST(PagedAttentionTest, Bf16Avx2IgnoresSlotsOutsideTheWindows) {
  if (!attention_avx2::Available()) GTEST_SKIP() << "no AVX2 and FMA on this CPU";
  const int nq = 8, nkv = 2, d = 64, block = 16, seqs = 5, blocks_each = 12;
  const int total = seqs * blocks_each + 3;
  for (int window : {0, 37}) {
    auto cache = KvCache::Create({1, total, block, nkv, d, d, 2}, 1 << 26);
    ASSERT_TRUE(cache.ok());
    PoisonEverySlot(*cache);
    // Sequence 0 prefills a 45-token chunk after 60 cached tokens; the others decode.
    const int contexts[seqs] = {105, 1, 17, 100, 150};
    const AttentionParams p{nq, nkv, d, d, 0.125f, window};
    StepBatch batch;
    std::vector<float> q;
    for (int s = 0; s < seqs; ++s) {
      std::vector<int32_t> table;
      for (int b = 0; b < blocks_each; ++b) table.push_back(2 + s * blocks_each + b);
      const int len = contexts[s], new_tokens = s == 0 ? 45 : 1;
      StepBatch fill;
      fill.token_ids.assign(len, 0);
      fill.seqs.push_back({len, len, table, true});
      WriteKv(Random(len * nkv * d, 300 + s).data(), Random(len * nkv * d, 320 + s).data(),
              fill.Slots(block), 0, *cache);
      batch.token_ids.insert(batch.token_ids.end(), new_tokens, 0);
      batch.seqs.push_back({new_tokens, len, table, s == 0});
      const std::vector<float> qs = Random(new_tokens * nq * d, 340 + s);
      q.insert(q.end(), qs.begin(), qs.end());
    }
    std::vector<float> got(batch.token_ids.size() * nq * d), sgemm(got.size());
    PagedAttentionAvx2(q.data(), batch, *cache, 0, p, got.data());
    PagedAttentionSgemm(q.data(), batch, *cache, 0, p, sgemm.data());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_TRUE(std::isfinite(got[i])) << "window " << window << ", index " << i;
      ASSERT_NEAR(got[i], sgemm[i], 1e-5) << "window " << window << ", index " << i;
    }
  }
}

// Scores of tens (softmax weights spanning e^±80) over a bf16 cache: the running max and
// the rescaling keep the result at the definition's.
TEST(PagedAttentionTest, Bf16WideScoreRangeMatchesDense) {
  const int len = 150, nq = 2, nkv = 1, d = 32;
  auto q = Random(len * nq * d, 51), k = Random(len * nkv * d, 52), v = Random(len * nkv * d, 53);
  for (float& x : q) x *= 20.0f;
  // The reference sees the cache's bf16 keys and values, and q as the kernel in use has it
  // (AMX rounds q to bf16: at scores of tens that alone moves a score by ~0.05).
  for (std::vector<float>* x : {&q, &k, &v}) {
    if (x == &q && !attention_amx::Available()) continue;
    std::vector<uint16_t> bits(x->size());
    FloatsToBf16(x->data(), x->size(), bits.data());
    Bf16ToFloats(bits.data(), bits.size(), x->data());
  }
  const auto want = DenseAttention(q, k, v, len, nq, nkv, d, 0);
  auto cache = KvCache::Create({1, 12, 16, nkv, d, d, 2}, 1 << 22);
  ASSERT_TRUE(cache.ok());
  StepBatch batch;
  batch.token_ids.assign(len, 0);
  batch.seqs.push_back({len, len, {3, 0, 1, 11, 4, 5, 6, 7, 8, 9}, true});
  WriteKv(k.data(), v.data(), batch.Slots(16), 0, *cache);
  AttentionParams p{nq, nkv, d, d, 1.0f / std::sqrt(float(d)), 0};
  std::vector<float> got(len * nq * d);
  PagedAttention(q.data(), batch, *cache, 0, p, got.data());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-2) << i;
}

// Each kernel the compute threads split (cpu_threads.h) gives the same bits on 1, 2 and
// 3 threads: norms and activations by rows, rotary embeddings by tokens, attention by
// (sequence, kv head) over a batch of a long prompt, a short one and decodes. OpenBLAS
// has threads of its own meanwhile, which must not change the fp32 cache's sgemm path.
TEST(ThreadCountTest, ChangesNoBitOfAnyKernel) {
  SetGemmThreads(3);
  const int64_t rows = 67, dim = 2048, width = 1408;
  const auto x = Random(rows * dim, 61), add = Random(rows * dim, 62), w = Random(dim, 63);
  const auto gate_up = Random(rows * 2 * width, 64);
  const int nq = 8, nkv = 2, d = 64, block = 16;
  RotaryEmbedding rope(d, 10000.0, RopeScaling{});
  std::vector<int32_t> positions(rows);
  for (int64_t t = 0; t < rows; ++t) positions[t] = static_cast<int32_t>(t * 13 % 500);
  const auto heads = Random(rows * nq * d, 65);
  // Three sequences: a 40-token prompt chunk after 20 cached tokens, a 25-token prompt,
  // and two decodes at contexts 90 and 33: 67 new tokens in all.
  StepBatch batch;
  batch.seqs.push_back({40, 60, {0, 1, 2, 3}, true});
  batch.seqs.push_back({25, 25, {4, 5}, true});
  batch.seqs.push_back({1, 90, {6, 7, 8, 9, 10, 11}, false});
  batch.seqs.push_back({1, 33, {12, 13, 14}, false});
  batch.token_ids.assign(rows, 0);
  AttentionParams p{nq, nkv, d, d, 0.125f, 0};
  const auto all_k = Random(int64_t{16} * block * nkv * d, 66);
  const auto all_v = Random(int64_t{16} * block * nkv * d, 67);

  auto run = [&](int threads) {
    SetCpuThreads(threads);
    std::vector<std::vector<float>> outs;
    std::vector<float> out(rows * dim), residual = x;
    RmsNorm(x.data(), w.data(), rows, dim, 1e-6f, out.data());
    outs.push_back(out);
    AddRmsNorm(residual.data(), add.data(), w.data(), rows, dim, 1e-6f, out.data());
    outs.push_back(out);
    outs.push_back(residual);
    std::vector<float> act(rows * width);
    ActMul(Activation::kSilu, gate_up.data(), rows, width, act.data());
    outs.push_back(act);
    std::vector<float> rotated = heads;
    rope.Apply(positions, nq, rotated.data());
    outs.push_back(rotated);
    for (const int dtype_bytes : {4, 2}) {  // fp32 cache (sgemm path), bf16 (AMX where present)
      auto cache = KvCache::Create({1, 16, block, nkv, d, d, dtype_bytes}, 1 << 24);
      EXPECT_TRUE(cache.ok());
      // Every slot of the 16 blocks written, so the cached positions hold keys.
      std::vector<int64_t> slots(16 * block);
      for (size_t i = 0; i < slots.size(); ++i) slots[i] = static_cast<int64_t>(i);
      WriteKv(all_k.data(), all_v.data(), slots, 0, *cache);
      std::vector<float> attended(rows * nq * d);
      PagedAttention(heads.data(), batch, *cache, 0, p, attended.data());
      outs.push_back(attended);
    }
    return outs;
  };
  const auto one = run(1);
  for (int threads : {2, 3}) {
    const auto many = run(threads);
    ASSERT_EQ(many.size(), one.size());
    for (size_t i = 0; i < one.size(); ++i) {
      EXPECT_EQ(many[i], one[i]) << "output " << i << " on " << threads << " threads";
    }
  }
  SetCpuThreads(1);
  SetGemmThreads(1);
}

}  // namespace
}  // namespace tpserve
