// attention_benchmark: the CPU attention paths over one bf16 KV cache, side by side in one
// process — PagedAttentionSgemm (keys and values widened to fp32, OpenBLAS sgemm) and
// PagedAttention (on an AMX CPU the tile kernel, attention_amx.h; on others with AVX2
// attention_avx2.h) — for a causal prefill of a whole prompt and for a batch of decodes
// at the same context, calls alternating between the two so that the machine's swings
// hit both alike.
//
//   bazel build -c opt //worker/kernels/cpu:attention_benchmark
//   bazel-bin/worker/kernels/cpu/attention_benchmark [--contexts 128,512,2048]
//       [--cases prefill,decode] [--heads 16] [--kv-heads 2] [--head-dim 64]
//       [--decode-batch 8] [--min-seconds 0.5]
//
// The default heads are one tp-2 rank's of the TinyLlama-1.1B shape (32 query heads and
// 4 kv heads of 64 in all); one layer, one thread. Per row: the median time of a call,
// and for the prefill the attention's FLOPs (2·d for q·kᵀ and 2·dv for P·V per query
// head and visible position) over it.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/args.h"
#include "worker/kernels/cpu/attention_amx.h"
#include "worker/kernels/cpu/attention_avx2.h"
#include "worker/kernels/cpu/openblas_core.h"
#include "worker/kernels/cpu/paged_attention.h"
#include "worker/kv_cache.h"
#include "worker/step_batch.h"

namespace tpserve {
namespace {

struct Flags {
  std::string contexts = "128,512,2048";
  std::string cases = "prefill,decode";
  int64_t heads = 16, kv_heads = 2, head_dim = 64, decode_batch = 8;
  double min_seconds = 0.5;
};

constexpr int kBlockSize = 16;

std::vector<float> Random(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist;
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

using AttentionFn = void (*)(const float*, const StepBatch&, const KvCache&, int,
                             const AttentionParams&, float*);

// Median seconds of `fn` and `gn` on the same inputs, their calls alternating until each
// has run for min_seconds (at least 3 calls each).
std::pair<double, double> TimePair(AttentionFn fn, AttentionFn gn, const std::vector<float>& q,
                                   const StepBatch& batch, const KvCache& cache,
                                   const AttentionParams& p, double min_seconds) {
  std::vector<float> out(batch.token_ids.size() * p.num_heads * p.v_head_dim);
  std::vector<double> a, b;
  double spent = 0;
  while (a.size() < 3 || spent < 2 * min_seconds) {
    for (int which = 0; which < 2; ++which) {
      const auto start = std::chrono::steady_clock::now();
      (which == 0 ? fn : gn)(q.data(), batch, cache, 0, p, out.data());
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      (which == 0 ? a : b).push_back(s);
      spent += s;
    }
  }
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  return {a[a.size() / 2], b[b.size() / 2]};
}

// PagedAttention with every call's keys gathered into the tile layout, as before decodes
// read them from the cache (attention_amx::SetKeysFromCache).
void PagedAttentionKeysGathered(const float* q, const StepBatch& batch, const KvCache& cache,
                                int layer, const AttentionParams& p, float* out) {
  attention_amx::SetKeysFromCache(false);
  PagedAttention(q, batch, cache, layer, p, out);
  attention_amx::SetKeysFromCache(true);
}

absl::Status Run(const Flags& f) {
  std::vector<int64_t> contexts;
  for (absl::string_view c : absl::StrSplit(f.contexts, ',')) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(c, &n) || n < 1 || n > 65536) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--contexts: \"%s\" is not a length from 1 to 65536", c));
    }
    contexts.push_back(n);
  }
  if (f.heads < 1 || f.kv_heads < 1 || f.heads % f.kv_heads != 0 || f.head_dim < 1 ||
      f.head_dim > 512 || f.decode_batch < 1 || f.decode_batch > 256) {
    return absl::InvalidArgumentError(
        "--heads must be a positive multiple of --kv-heads, --head-dim 1 to 512, "
        "--decode-batch 1 to 256");
  }
  const bool amx = attention_amx::Available();
  const AttentionParams p{f.heads, f.kv_heads, f.head_dim, f.head_dim,
                          1.0f / std::sqrt(static_cast<float>(f.head_dim)), 0};
  const char* kernel = amx ? "the AMX tile kernel"
                       : attention_avx2::Available() && attention_avx2::Supports(p)
                           ? "the AVX2 kernel (no AMX on this CPU)"
                           : "the sgemm path too";
  openblas_set_num_threads(1);  // the sgemm path on one thread too, as the worker runs it
  std::printf("heads %ld/%ld of %ld, bf16 KV cache, one thread; PagedAttention runs %s\n",
              f.heads, f.kv_heads, f.head_dim, kernel);
  std::printf("%-8s %7s | %12s %9s | %12s %9s | %7s | %12s %7s\n", "case", "context",
              "sgemm ms", "GFLOP/s", "kernel ms", "GFLOP/s", "ratio", "gathered ms", "ratio");
  std::mt19937 rng(7);
  for (int64_t ctx : contexts) {
    const int64_t blocks_per_seq = (ctx + kBlockSize - 1) / kBlockSize;
    absl::StatusOr<KvCache> cache = KvCache::Create(
        {1, static_cast<int>(blocks_per_seq * f.decode_batch), kBlockSize,
         static_cast<int>(f.kv_heads), static_cast<int>(f.head_dim),
         static_cast<int>(f.head_dim), 2},
        int64_t{1} << 40);
    if (!cache.ok()) return cache.status();
    // Every sequence's whole context written once (random keys and values).
    std::vector<std::vector<int32_t>> tables(f.decode_batch);
    for (int64_t s = 0; s < f.decode_batch; ++s) {
      for (int64_t b = 0; b < blocks_per_seq; ++b) {
        tables[s].push_back(static_cast<int32_t>(b * f.decode_batch + s));  // interleaved
      }
      StepBatch fill;
      fill.token_ids.assign(ctx, 0);
      fill.seqs.push_back({static_cast<int32_t>(ctx), static_cast<int32_t>(ctx), tables[s], true});
      const std::vector<float> k = Random(ctx * f.kv_heads * f.head_dim, rng);
      const std::vector<float> v = Random(ctx * f.kv_heads * f.head_dim, rng);
      WriteKv(k.data(), v.data(), fill.Slots(kBlockSize), 0, *cache);
    }
    StepBatch prefill;  // sequence 0's whole prompt
    prefill.token_ids.assign(ctx, 0);
    prefill.seqs.push_back({static_cast<int32_t>(ctx), static_cast<int32_t>(ctx), tables[0], true});
    StepBatch decode;  // the last token of every sequence
    decode.token_ids.assign(f.decode_batch, 0);
    for (int64_t s = 0; s < f.decode_batch; ++s) {
      decode.seqs.push_back({1, static_cast<int32_t>(ctx), tables[s], false});
    }
    struct Case {
      const char* name;
      const StepBatch* batch;
      double flops;
    };
    const double visible = static_cast<double>(ctx) * (ctx + 1) / 2;  // causal prefill
    const Case cases[] = {
        {"prefill", &prefill, visible * f.heads * 4.0 * f.head_dim},
        {"decode", &decode,
         static_cast<double>(f.decode_batch) * ctx * f.heads * 4.0 * f.head_dim}};
    for (const Case& c : cases) {
      if (!absl::StrContains(f.cases, c.name)) continue;
      const std::vector<float> q = Random(c.batch->token_ids.size() * f.heads * f.head_dim, rng);
      const auto [sgemm, tiles] =
          TimePair(&PagedAttentionSgemm, &PagedAttention, q, *c.batch, *cache, p, f.min_seconds);
      // The tile kernel with its keys always gathered, against it as it runs (timed anew,
      // alternating): how much reading a decode's keys from the cache saves.
      double gathered = 0, tiles_again = 0;
      if (amx) {
        std::tie(gathered, tiles_again) = TimePair(&PagedAttentionKeysGathered, &PagedAttention,
                                                   q, *c.batch, *cache, p, f.min_seconds);
      }
      const std::string name = c.name == std::string("decode")
                                   ? absl::StrFormat("decode%ld", f.decode_batch)
                                   : std::string(c.name);
      std::printf("%-8s %7ld | %12.3f %9.1f | %12.3f %9.1f | %6.2fx | %12.3f %6.2fx\n",
                  name.c_str(), ctx, sgemm * 1e3, c.flops / sgemm / 1e9, tiles * 1e3,
                  c.flops / tiles / 1e9, sgemm / tiles, gathered * 1e3,
                  amx ? gathered / tiles_again : 0.0);
    }
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) {
  const std::string openblas_note = tpserve::UseOpenBlasKernelsForThisCpu(argv);  // may re-execute
  if (!openblas_note.empty()) std::printf("%s\n", openblas_note.c_str());
  tpserve::Flags f;
  tpserve::ArgParser p("attention_benchmark");
  p.AddString("contexts", &f.contexts, "context lengths to run, e.g. 128,512,2048");
  p.AddString("cases", &f.cases, "which of prefill,decode to run (default both)");
  p.AddInt("heads", &f.heads, "local query heads (default 16: a tp-2 rank of TinyLlama)");
  p.AddInt("kv-heads", &f.kv_heads, "local kv heads (default 2)");
  p.AddInt("head-dim", &f.head_dim, "head size (default 64)");
  p.AddInt("decode-batch", &f.decode_batch, "sequences in the decode case (default 8)");
  p.AddDouble("min-seconds", &f.min_seconds, "time each path for at least this long");
  absl::Status s = ParseFlagsOrExit(p, argc, argv);
  if (s.ok()) s = tpserve::Run(f);
  if (!s.ok()) {
    std::fprintf(stderr, "attention_benchmark: %s\n%s\n", std::string(s.message()).c_str(),
                 p.HelpHint().c_str());
    return 1;
  }
  return 0;
}
