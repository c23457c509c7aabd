// Paged attention and the KV-cache write on the GPU against the CPU reference
// (worker/kernels/cpu/paged_attention.h), in fp32 and bf16.
//
// Batches mix prefill from 0, prefill chunks over a cached prefix and decodes, over
// scattered block tables. Cache slots past each context and the block that pads every
// block-table row hold NaN, so a kernel reading past a context fails the check, and the
// output sits between NaN guards. Tagged "gpu": device tests skip without a CUDA device;
// the size checks run anywhere.
#include "worker/kernels/cuda/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "gtest/gtest.h"
#include "worker/cuda/cuda_test_util.h"
#include "worker/kernels/cpu/paged_attention.h"
#include "worker/kv_cache.h"
#include "worker/step_batch.h"

namespace tpserve {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct SeqSpec {
  int num_new;
  int context_len;
};

struct AttentionCase {
  std::string name;
  int num_heads, num_kv_heads, head_dim, v_head_dim;
  std::vector<SeqSpec> seqs;
  int block_size = 16;
  int sliding_window = 0;
  int query_slack = 0;        // max_query_len = longest query + slack
  int context_slack = 0;      // max_context_len = longest context + slack
  int padding_seqs = 0;       // trailing sequences without new tokens (a padded graph batch)
  int padding_tokens = 0;     // trailing token rows that no sequence owns (slot −1)
  bool expect_split = false;  // the plan must split the context across CTAs
};

AttentionCase Case(std::string name, int num_heads, int num_kv_heads, int head_dim, int v_head_dim,
                   std::vector<SeqSpec> seqs) {
  AttentionCase c;
  c.name = std::move(name);
  c.num_heads = num_heads, c.num_kv_heads = num_kv_heads;
  c.head_dim = head_dim, c.v_head_dim = v_head_dim;
  c.seqs = std::move(seqs);
  return c;
}

// `n` decodes with contexts drawn from [1, max_context].
std::vector<SeqSpec> Decodes(int n, int max_context, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<SeqSpec> seqs;
  for (int i = 0; i < n; ++i) seqs.push_back({1, 1 + static_cast<int>(rng() % max_context)});
  return seqs;
}

int CeilDiv(int a, int b) { return (a + b - 1) / b; }

// The sequences of `seqs` over a cache of *num_blocks blocks, their block ids a random
// permutation; *poison_block belongs to none of them.
StepBatch ScatteredBatch(const std::vector<SeqSpec>& seqs, int block_size, std::mt19937& rng,
                         int* num_blocks, int* poison_block) {
  int needed = 0;
  for (const SeqSpec& s : seqs) needed += CeilDiv(s.context_len, block_size);
  *num_blocks = needed + 2;  // + one unused block of random data + the poison block
  std::vector<int32_t> ids(*num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  *poison_block = ids.back();
  StepBatch batch;
  int next = 0;
  for (const SeqSpec& s : seqs) {
    SequenceStep step;
    step.num_new_tokens = s.num_new;
    step.context_len = s.context_len;
    const int blocks = CeilDiv(s.context_len, block_size);
    step.block_table.assign(ids.begin() + next, ids.begin() + next + blocks);
    next += blocks;
    batch.seqs.push_back(step);
    batch.token_ids.resize(batch.token_ids.size() + s.num_new, 0);
  }
  return batch;
}

template <typename U>
void Upload(const std::vector<U>& host, DeviceArray<U>& device) {
  ASSERT_EQ(host.size(), device.size());
  TPSERVE_ASSERT_CUDA(
      cudaMemcpy(device.get(), host.data(), host.size() * sizeof(U), cudaMemcpyHostToDevice));
}

// Equal, NaN matching NaN; counts the mismatches.
int64_t Mismatches(const std::vector<float>& got, const float* want) {
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    bad += !(got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i])));
  }
  return bad;
}

// One case on the device and on the CPU: a random cache holding the batch's prefixes,
// then steps of LaunchWriteKv + LaunchPagedAttention with fixed sizes (graph-replayable).
template <typename T>
class AttentionHarness {
 public:
  // `first` fixes the sizes; later steps must fit them (same sequences and tokens, contexts
  // within max_context_len and the block tables' capacity).
  AttentionHarness(const AttentionCase& c, const StepBatch& first, int num_blocks, int poison_block,
                   uint32_t seed)
      : c_(c),
        cache_(*KvCache::Create(
            {1, num_blocks, c.block_size, c.num_kv_heads, c.head_dim, c.v_head_dim},
            std::numeric_limits<int64_t>::max())),
        poison_block_(poison_block),
        sizes_(HostSizes(c, first)),
        q_width_(int64_t{c.num_heads} * c.head_dim),
        k_width_(int64_t{c.num_kv_heads} * c.head_dim),
        v_width_(int64_t{c.num_kv_heads} * c.v_head_dim),
        row_stride_(q_width_ + k_width_ + v_width_ + 8),  // not the packed width
        workspace_bytes_(PagedAttentionWorkspaceBytes(sizes_, c.num_heads, c.num_kv_heads,
                                                      c.head_dim, c.v_head_dim)),
        d_query_start_(sizes_.num_seqs + 1),
        d_context_lens_(sizes_.num_seqs),
        d_block_tables_(int64_t{sizes_.num_seqs} * sizes_.max_blocks_per_seq),
        d_qkv_(sizes_.num_tokens * row_stride_),
        d_slots_(sizes_.num_tokens),
        d_k_cache_(cache_.shape().num_slots() * k_width_),
        d_v_cache_(cache_.shape().num_slots() * v_width_),
        workspace_(workspace_bytes_ / sizeof(float)),
        out_(int64_t{sizes_.num_tokens} * c.num_heads * c.v_head_dim) {
    meta_ = sizes_;
    meta_.query_start = d_query_start_.get();
    meta_.context_lens = d_context_lens_.get();
    meta_.block_tables = d_block_tables_.get();
    FillCache(first, seed);
  }

  size_t workspace_bytes() const { return workspace_bytes_; }

  // Fresh qkv rows, slots and metadata for `batch` in the device buffers.
  void SetStep(const StepBatch& batch, uint32_t seed) {
    batch_ = batch;
    qkv_ = RoundTo<T>(RandomVector(sizes_.num_tokens * row_stride_, seed));
    std::vector<int64_t> slots = batch.Slots(c_.block_size);
    slots.resize(sizes_.num_tokens, -1);
    std::vector<int32_t> query_start(sizes_.num_seqs + 1, 0), context_lens(sizes_.num_seqs, 0);
    std::vector<int32_t> tables(int64_t{sizes_.num_seqs} * sizes_.max_blocks_per_seq,
                                poison_block_);
    for (size_t s = 0; s < batch.seqs.size(); ++s) {
      const SequenceStep& seq = batch.seqs[s];
      query_start[s + 1] = query_start[s] + seq.num_new_tokens;
      context_lens[s] = seq.context_len;
      std::copy(seq.block_table.begin(), seq.block_table.end(),
                tables.begin() + s * sizes_.max_blocks_per_seq);
    }
    for (int s = static_cast<int>(batch.seqs.size()); s < sizes_.num_seqs; ++s) {
      query_start[s + 1] = query_start[s];  // padding sequences: no new tokens
    }
    Upload(query_start, d_query_start_);
    Upload(context_lens, d_context_lens_);
    Upload(tables, d_block_tables_);
    Upload(slots, d_slots_);
    Upload(ToT(qkv_), d_qkv_);
    slots_ = std::move(slots);
  }

  cudaError_t Launch(cudaStream_t stream) {
    const cudaError_t err = LaunchWriteKv<T>(
        d_qkv_.get(), row_stride_, q_width_, q_width_ + k_width_, d_slots_.get(), sizes_.num_tokens,
        c_.num_kv_heads, c_.head_dim, c_.v_head_dim, d_k_cache_.get(), d_v_cache_.get(), stream);
    if (err != cudaSuccess) return err;
    return LaunchPagedAttention<T>(d_qkv_.get(), row_stride_, d_k_cache_.get(), d_v_cache_.get(),
                                   meta_, c_.block_size, c_.num_heads, c_.num_kv_heads, c_.head_dim,
                                   c_.v_head_dim, 1.0f / std::sqrt(static_cast<float>(c_.head_dim)),
                                   c_.sliding_window, out_.get(),
                                   workspace_bytes_ > 0 ? workspace_.get() : nullptr, stream);
  }

  // After the launched step ran: applies the CPU write, compares caches and outputs.
  void Check() {
    const int64_t tokens = batch_.token_ids.size();
    std::vector<float> q(tokens * q_width_), k(tokens * k_width_), v(tokens * v_width_);
    for (int64_t t = 0; t < tokens; ++t) {
      const float* row = qkv_.data() + t * row_stride_;
      std::copy(row, row + q_width_, q.begin() + t * q_width_);
      std::copy(row + q_width_, row + q_width_ + k_width_, k.begin() + t * k_width_);
      std::copy(row + q_width_ + k_width_, row + q_width_ + k_width_ + v_width_,
                v.begin() + t * v_width_);
    }
    WriteKv(k.data(), v.data(), absl::MakeConstSpan(slots_.data(), tokens), 0, cache_);
    EXPECT_EQ(Mismatches(d_k_cache_.ToHost(), cache_.key(0, 0)), 0) << "keys after the write";
    EXPECT_EQ(Mismatches(d_v_cache_.ToHost(), cache_.value(0, 0)), 0) << "values after it";

    AttentionParams params;
    params.num_heads = c_.num_heads, params.num_kv_heads = c_.num_kv_heads;
    params.head_dim = c_.head_dim, params.v_head_dim = c_.v_head_dim;
    params.scale = 1.0f / std::sqrt(static_cast<float>(c_.head_dim));
    params.sliding_window = c_.sliding_window;
    std::vector<float> want(tokens * c_.num_heads * c_.v_head_dim);
    PagedAttention(q.data(), batch_, cache_, 0, params, want.data());
    const std::vector<float> got = out_.ToHostCheckingGuards();
    ExpectClose(got, want);
  }

 private:
  static std::vector<T> ToT(const std::vector<float>& v) {
    std::vector<T> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) out[i] = FromFloat<T>(v[i]);
    return out;
  }

  // Random keys and values (T-rounded) everywhere, NaN in the poison block and in each
  // sequence's slots past its context; the same on the device.
  void FillCache(const StepBatch& batch, uint32_t seed) {
    const int64_t slots = cache_.shape().num_slots();
    const std::vector<float> keys = RoundTo<T>(RandomVector(slots * k_width_, seed + 101));
    const std::vector<float> values = RoundTo<T>(RandomVector(slots * v_width_, seed + 102));
    std::copy(keys.begin(), keys.end(), cache_.key(0, 0));
    std::copy(values.begin(), values.end(), cache_.value(0, 0));
    auto poison = [&](int64_t slot) {
      std::fill(cache_.key(0, slot), cache_.key(0, slot) + k_width_, kNaN);
      std::fill(cache_.value(0, slot), cache_.value(0, slot) + v_width_, kNaN);
    };
    const int bs = c_.block_size;
    for (int i = 0; i < bs; ++i) poison(int64_t{poison_block_} * bs + i);
    for (const SequenceStep& s : batch.seqs) {
      for (int p = s.context_len; p < static_cast<int>(s.block_table.size()) * bs; ++p) {
        poison(int64_t{s.block_table[p / bs]} * bs + p % bs);
      }
    }
    Upload(ToT(std::vector<float>(cache_.key(0, 0), cache_.key(0, 0) + slots * k_width_)),
           d_k_cache_);
    Upload(ToT(std::vector<float>(cache_.value(0, 0), cache_.value(0, 0) + slots * v_width_)),
           d_v_cache_);
  }

  // Overall and per (token, head) row — one wrong row of a large batch hides in the
  // overall norm — and the padding rows left untouched (still NaN).
  void ExpectClose(const std::vector<float>& got, const std::vector<float>& want) const {
    const std::vector<float> real(got.begin(), got.begin() + want.size());
    EXPECT_LT(RelativeError(real, want), KernelTolerance<T>());
    const int dv = c_.v_head_dim;
    double worst = 0;
    size_t worst_row = 0;
    for (size_t r = 0; r * dv < want.size(); ++r) {
      const double err =
          RelativeError(std::vector<float>(real.begin() + r * dv, real.begin() + (r + 1) * dv),
                        std::vector<float>(want.begin() + r * dv, want.begin() + (r + 1) * dv));
      if (!(err <= worst)) worst = err, worst_row = r;
    }
    EXPECT_LT(worst, 4 * KernelTolerance<T>())
        << "token " << worst_row / c_.num_heads << " head " << worst_row % c_.num_heads;
    const int64_t written =
        std::count_if(got.begin() + want.size(), got.end(), [](float x) { return !std::isnan(x); });
    EXPECT_EQ(written, 0) << "padding rows were written";
  }

  // The host sizes of every step: `first`'s, with the case's slack and padding.
  static AttentionMetadata HostSizes(const AttentionCase& c, const StepBatch& first) {
    AttentionMetadata sizes;
    sizes.num_seqs = static_cast<int>(first.seqs.size()) + c.padding_seqs;
    sizes.num_tokens = static_cast<int>(first.token_ids.size()) + c.padding_tokens;
    for (const SequenceStep& s : first.seqs) {
      sizes.max_query_len = std::max(sizes.max_query_len, s.num_new_tokens + c.query_slack);
      sizes.max_context_len = std::max(sizes.max_context_len, s.context_len + c.context_slack);
    }
    sizes.max_blocks_per_seq = CeilDiv(sizes.max_context_len, c.block_size);
    return sizes;
  }

  AttentionCase c_;
  KvCache cache_;
  int poison_block_;
  AttentionMetadata sizes_, meta_;  // meta_: sizes_ with the device pointers
  int64_t q_width_, k_width_, v_width_, row_stride_;
  size_t workspace_bytes_;
  DeviceArray<int32_t> d_query_start_, d_context_lens_, d_block_tables_;
  DeviceArray<T> d_qkv_;
  DeviceArray<int64_t> d_slots_;
  DeviceArray<T> d_k_cache_, d_v_cache_;
  DeviceArray<float> workspace_;
  GuardedOutput<T> out_;
  StepBatch batch_;
  std::vector<float> qkv_;
  std::vector<int64_t> slots_;
};

template <typename T>
void CheckCase(const AttentionCase& c, uint32_t seed) {
  SCOPED_TRACE(c.name);
  std::mt19937 rng(seed);
  int num_blocks = 0, poison_block = 0;
  const StepBatch batch = ScatteredBatch(c.seqs, c.block_size, rng, &num_blocks, &poison_block);
  AttentionHarness<T> harness(c, batch, num_blocks, poison_block, seed);
  EXPECT_EQ(harness.workspace_bytes() > 0, c.expect_split);
  harness.SetStep(batch, seed + 1);
  TPSERVE_ASSERT_CUDA(harness.Launch(nullptr));
  TPSERVE_ASSERT_CUDA(cudaDeviceSynchronize());
  harness.Check();
}

template <typename T>
class PagedAttentionCudaTest : public ::testing::Test {};
using Types = ::testing::Types<float, __nv_bfloat16>;
TYPED_TEST_SUITE(PagedAttentionCudaTest, Types);

TYPED_TEST(PagedAttentionCudaTest, MixedPrefillChunksAndDecodes) {
  TPSERVE_SKIP_WITHOUT_CUDA();
  std::vector<AttentionCase> cases;
  // Prefill from 0, a chunk over a cached prefix, decodes, a one-token prompt.
  cases.push_back(Case("gqa4_d64", 8, 2, 64, 64, {{37, 37}, {20, 90}, {1, 50}, {1, 17}, {1, 1}}));
  cases.push_back(Case("mha_d32_bs1", 4, 4, 32, 32, {{9, 9}, {1, 30}, {5, 12}}));
  cases.back().block_size = 1;
  cases.push_back(Case("gqa8_d128_bs5_window", 16, 2, 128, 128, {{23, 23}, {1, 40}, {12, 60}}));
  cases.back().block_size = 5, cases.back().sliding_window = 7;
  cases.push_back(Case("long_prefill_causal", 4, 1, 64, 64, {{300, 300}, {1, 10}, {70, 150}}));
  cases.back().expect_split = true;  // 57 CTAs: the 300 positions split in two
  cases.push_back(Case("bounds_past_lengths", 8, 1, 16, 16, {{40, 100}, {1, 70}, {3, 3}}));
  cases.back().query_slack = 5, cases.back().context_slack = 50;
  cases.back().padding_seqs = 2, cases.back().padding_tokens = 3;
  for (size_t i = 0; i < cases.size(); ++i) CheckCase<TypeParam>(cases[i], 100 + i);
}

TYPED_TEST(PagedAttentionCudaTest, HeadDims) {
  TPSERVE_SKIP_WITHOUT_CUDA();
  const std::vector<SeqSpec> seqs = {{10, 10}, {1, 25}, {7, 31}};
  std::vector<AttentionCase> cases;
  cases.push_back(Case("d4", 4, 1, 4, 4, {{3, 3}, {1, 5}, {6, 40}}));
  cases.push_back(Case("d8_dv16_bs5", 8, 2, 8, 16, {{17, 17}, {1, 9}, {4, 33}}));
  cases.back().block_size = 5;
  cases.push_back(Case("d16", 4, 4, 16, 16, seqs));
  cases.push_back(Case("d12_dv20_unaligned", 6, 3, 12, 20, seqs));  // bf16: element loads
  cases.push_back(Case("d80", 4, 4, 80, 80, seqs));
  cases.push_back(Case("d128_dv64", 8, 2, 128, 64, seqs));
  cases.push_back(Case("d256", 4, 2, 256, 256, {{33, 33}, {1, 80}, {5, 21}}));
  for (size_t i = 0; i < cases.size(); ++i) CheckCase<TypeParam>(cases[i], 200 + i);
}

TYPED_TEST(PagedAttentionCudaTest, DecodeBatches) {
  TPSERVE_SKIP_WITHOUT_CUDA();
  std::vector<AttentionCase> cases;
  // An 8B Llama's heads: batch 1 at 3000 tokens splits the context across CTAs.
  cases.push_back(Case("llama_batch1_3000", 32, 8, 128, 128, {{1, 3000}}));
  cases.back().expect_split = true;
  cases.push_back(Case("llama_batch8", 32, 8, 128, 128, Decodes(8, 1500, 7)));
  cases.back().context_slack = 700, cases.back().expect_split = true;
  cases.push_back(Case("llama_batch64_padded", 32, 8, 128, 128, Decodes(64, 600, 8)));
  cases.back().padding_seqs = 3, cases.back().padding_tokens = 3;
  // A group of 16 heads spans two row tiles.
  cases.push_back(Case("mqa_group16", 16, 1, 64, 64, {{1, 700}, {1, 1}, {1, 2500}}));
  cases.back().expect_split = true;
  cases.push_back(Case("window_bs5", 8, 2, 64, 64, {{1, 3000}, {1, 60}}));
  cases.back().block_size = 5, cases.back().sliding_window = 100, cases.back().expect_split = true;
  for (size_t i = 0; i < cases.size(); ++i) CheckCase<TypeParam>(cases[i], 300 + i);
}

TYPED_TEST(PagedAttentionCudaTest, SplitContextUnderPrefillChunks) {
  TPSERVE_SKIP_WITHOUT_CUDA();
  std::vector<AttentionCase> cases;
  cases.push_back(Case("chunk16_over_3000", 8, 2, 128, 128, {{16, 3000}}));
  cases.back().expect_split = true;
  cases.push_back(Case("chunk_window_bs5", 4, 4, 32, 32, {{9, 2000}, {1, 1200}}));
  cases.back().block_size = 5, cases.back().sliding_window = 300, cases.back().expect_split = true;
  for (size_t i = 0; i < cases.size(); ++i) CheckCase<TypeParam>(cases[i], 400 + i);
}

// One captured graph, replayed after the lengths, block tables and slots changed on the
// device: the launch configuration must not depend on them.
TYPED_TEST(PagedAttentionCudaTest, CapturedGraphReplaysNewLengths) {
  TPSERVE_SKIP_WITHOUT_CUDA();
  AttentionCase c = Case("graph", 32, 8, 128, 128, Decodes(8, 1200, 9));
  c.context_slack = 300;
  std::mt19937 rng(500);
  int num_blocks = 0, poison_block = 0;
  const StepBatch first = ScatteredBatch(c.seqs, c.block_size, rng, &num_blocks, &poison_block);
  AttentionHarness<TypeParam> harness(c, first, num_blocks, poison_block, 500);
  ASSERT_GT(harness.workspace_bytes(), 0u);

  cudaStream_t stream;
  TPSERVE_ASSERT_CUDA(cudaStreamCreate(&stream));
  harness.SetStep(first, 501);
  TPSERVE_ASSERT_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  TPSERVE_ASSERT_CUDA(harness.Launch(stream));
  cudaGraph_t graph;
  TPSERVE_ASSERT_CUDA(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  TPSERVE_ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  TPSERVE_ASSERT_CUDA(cudaGraphLaunch(exec, stream));
  TPSERVE_ASSERT_CUDA(cudaStreamSynchronize(stream));
  harness.Check();

  // Next step: each sequence takes its neighbour's block table and a new length in it.
  StepBatch next = first;
  for (size_t s = 0; s < next.seqs.size(); ++s) {
    SequenceStep& seq = next.seqs[s];
    seq.block_table = first.seqs[(s + 1) % first.seqs.size()].block_table;
    // Within the neighbour's old context: its slots past that hold NaN.
    seq.context_len =
        1 + static_cast<int>(rng() % first.seqs[(s + 1) % first.seqs.size()].context_len);
  }
  harness.SetStep(next, 502);
  TPSERVE_ASSERT_CUDA(cudaGraphLaunch(exec, stream));
  TPSERVE_ASSERT_CUDA(cudaStreamSynchronize(stream));
  harness.Check();
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// Host-side checks: no device needed, nothing launched.
TEST(PagedAttentionSizesTest, RejectsUnsupportedAndSkipsEmpty) {
  AttentionMetadata meta;
  meta.num_seqs = 1, meta.num_tokens = 1, meta.max_blocks_per_seq = 4;
  meta.max_query_len = 1, meta.max_context_len = 64;
  auto launch = [&](int heads, int kv_heads, int d, int dv, int block_size) {
    return LaunchPagedAttention<float>(nullptr, int64_t{heads} * d, nullptr, nullptr, meta,
                                       block_size, heads, kv_heads, d, dv, 1.0f, 0, nullptr,
                                       nullptr, nullptr);
  };
  EXPECT_EQ(launch(8, 2, 257, 64, 16), cudaErrorInvalidValue);
  EXPECT_EQ(launch(8, 2, 64, 0, 16), cudaErrorInvalidValue);
  EXPECT_EQ(launch(8, 3, 64, 64, 16), cudaErrorInvalidValue);  // 8 heads over 3 kv heads
  EXPECT_EQ(launch(8, 2, 64, 64, 15), cudaErrorInvalidValue);  // table too short for 64
  EXPECT_EQ(launch(8, 2, 64, 64, 16), cudaErrorInvalidValue);  // null pointers
  meta.num_tokens = 0;
  EXPECT_EQ(launch(8, 2, 64, 64, 16), cudaSuccess);
  EXPECT_EQ(
      LaunchWriteKv<float>(nullptr, 64, 0, 32, nullptr, 0, 2, 16, 16, nullptr, nullptr, nullptr),
      cudaSuccess);
  EXPECT_EQ(
      LaunchWriteKv<float>(nullptr, 64, 0, 32, nullptr, 1, 0, 16, 16, nullptr, nullptr, nullptr),
      cudaErrorInvalidValue);
}

TEST(PagedAttentionSizesTest, SplitsOnlyLongContextsOfSmallBatches) {
  AttentionMetadata meta;
  meta.num_seqs = 1, meta.num_tokens = 1, meta.max_query_len = 1;
  meta.max_context_len = 3000, meta.max_blocks_per_seq = 188;
  EXPECT_GT(PagedAttentionWorkspaceBytes(meta, 32, 8, 128, 128), 0u);
  meta.max_context_len = 200;
  EXPECT_EQ(PagedAttentionWorkspaceBytes(meta, 32, 8, 128, 128), 0u);
  meta.num_seqs = meta.num_tokens = 64, meta.max_context_len = 3000;
  EXPECT_EQ(PagedAttentionWorkspaceBytes(meta, 32, 8, 128, 128), 0u);
}

}  // namespace
}  // namespace tpserve
