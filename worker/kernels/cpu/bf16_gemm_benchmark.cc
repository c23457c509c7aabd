// bf16_gemm_benchmark: MatMulBf16 (bf16 weights, oneDNN) and MatMulInt8 (int8 weights
// with per-channel scales) beside MatMulTransB (fp32 weights, OpenBLAS) on Llama-shaped
// linear layers, at decode and prefill row counts,
// beside this machine's memory read bandwidth measured in the same run.
//
//   bazel build -c opt //worker/kernels/cpu:bf16_gemm_benchmark
//   bazel-bin/worker/kernels/cpu/bf16_gemm_benchmark [--threads 1,2]
//       [--rows 1,8,32,64,512,2048] [--min-seconds 0.3] [--max-isa avx2|avx512_core]
//
// Each layer's weight is copied until the copies fill 1 GiB per format and every call
// reads the next copy, so decode reads its weight from memory as a model step does, not
// from a cache. "wGB/s" is weight bytes (2 per element for bf16, 4 for fp32) / time;
// "gain" is fp32 time / bf16 time; "bf16 floor" is the weight's bf16 bytes over the
// measured read bandwidth: the decode time of a kernel that only streams the weight
// ("int8 floor" likewise for 1 byte per element). MatMulInt8's columns are timed at the
// first thread count only, its threads being the compute threads (SetCpuThreads).
// Before the table, the peak rate of one thread's dot-product instructions (vdpbf16ps,
// which oneDNN's bf16 brgemm runs without AMX, and vpdpwssd, MatMulInt8's) on registers
// only, or on a CPU without them the AVX2 kernels' (vfmadd231ps; vpmaddwd with vpaddd):
// what the prefill GFLOP/s columns compare with. On an AMX CPU the last column ("tiles'
// layout") is the tile kernel's speed on its own tile-by-tile packing over its speed on
// oneDNN's, calls alternating (RatioInTurns).
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/args.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "worker/dtype.h"
#include "worker/kernels/cpu/bf16_amx.h"
#include "worker/kernels/cpu/bf16_avx2.h"
#include "worker/kernels/cpu/bf16_gemm.h"
#include "worker/kernels/cpu/cpu_threads.h"
#include "worker/kernels/cpu/gemm.h"
#include "worker/kernels/cpu/int8_gemm.h"
#include "worker/kernels/cpu/openblas_core.h"

namespace tpserve {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

struct Layer {
  const char* set;  // what --sets selects it by
  const char* name;
  int64_t n_out, k;
};

// TinyLlama-1.1B (hidden 2048, intermediate 5632, 4 kv heads of 64), one rank's shards
// of it at tp 2 (and of its untied LM head), and Llama-2-7B.
constexpr Layer kLayers[] = {
    {"tiny", "tiny qkv", 2048 + 2 * 256, 2048},    {"tiny", "tiny o", 2048, 2048},
    {"tiny", "tiny gate_up", 2 * 5632, 2048},      {"tiny", "tiny down", 2048, 5632},
    {"tiny-tp2", "tp2 qkv", 1024 + 2 * 128, 2048}, {"tiny-tp2", "tp2 o", 2048, 1024},
    {"tiny-tp2", "tp2 gate_up", 5632, 2048},       {"tiny-tp2", "tp2 down", 2048, 2816},
    {"tiny-tp2", "tp2 lm_head", 16000, 2048},      {"7b", "7b gate", 11008, 4096},
    {"7b", "7b down", 4096, 11008},
};

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

#define TPSERVE_PEAK_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx512vnni")))

// The tile unit's rate with operands in registers, in L1 and in L2 (the kernel's own loop,
// bf16_amx::CachedTileLoopFlops), sampled in turn many times for about 0.1 ms each, so
// that each level meets the same moments of a shared host: the median and the fastest
// tenth's rate.
void PrintCachedTileLoops() {
  constexpr int kSamples = 400;
  std::vector<double> rates[3];
  for (int i = 0; i < kSamples; ++i) {
    rates[0].push_back(bf16_amx::PeakTileFlops(4'000));
    rates[1].push_back(bf16_amx::CachedTileLoopFlops(/*weights_in_l1=*/true, 20));
    rates[2].push_back(bf16_amx::CachedTileLoopFlops(/*weights_in_l1=*/false, 20));
  }
  double median[3], fast[3];
  for (int l = 0; l < 3; ++l) {
    std::sort(rates[l].begin(), rates[l].end());
    median[l] = rates[l][kSamples / 2] / 1e9;
    fast[l] = rates[l][kSamples * 9 / 10] / 1e9;
  }
  std::printf("AMX tile loop, one thread, %d samples each in turn, GFLOP/s median (fastest tenth): "
              "registers %.0f (%.0f), operands in L1 %.0f (%.0f), in L2 %.0f (%.0f)\n",
              kSamples, median[0], fast[0], median[1], fast[1], median[2], fast[2]);
}

// One instruction `op` (vdpbf16ps or vpdpwssd: 16 lanes × 2 products × 2 ops each) on
// 12 independent accumulators per iteration, registers only, `iterations` times; ops per
// second. One asm block with named operands: an array of vectors would live on the stack.
#define TPSERVE_DOT_PEAK(op)                                                            \
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0,     \
          a6 = a0, a7 = a0, a8 = a0, a9 = a0, a10 = a0, a11 = a0;                       \
  const __m512i x = _mm512_set1_epi16(0x3f80), w = _mm512_set1_epi16(0x3c00);           \
  const auto start = std::chrono::steady_clock::now();                                  \
  for (int64_t it = 0; it < iterations; ++it) {                                         \
    asm volatile(op " %13, %12, %0\n\t" op " %13, %12, %1\n\t" op " %13, %12, %2\n\t"   \
                 op " %13, %12, %3\n\t" op " %13, %12, %4\n\t" op " %13, %12, %5\n\t"   \
                 op " %13, %12, %6\n\t" op " %13, %12, %7\n\t" op " %13, %12, %8\n\t"   \
                 op " %13, %12, %9\n\t" op " %13, %12, %10\n\t" op " %13, %12, %11"     \
                 : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6), \
                   "+v"(a7), "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11)                   \
                 : "v"(x), "v"(w));                                                     \
  }                                                                                     \
  const double s = Seconds(start);                                                      \
  return 12.0 * 64.0 * double(iterations) / s;

TPSERVE_PEAK_TARGET double PeakBf16DotFlops(int64_t iterations) {
  TPSERVE_DOT_PEAK("vdpbf16ps")
}

TPSERVE_PEAK_TARGET double PeakInt16DotOps(int64_t iterations) {
  TPSERVE_DOT_PEAK("vpdpwssd")
}

#undef TPSERVE_DOT_PEAK

// The AVX2 kernels' instructions on 12 independent ymm accumulators, registers only:
// vfmadd231ps (8 lanes × 2 flops) or vpmaddwd + vpaddd (16 products, 2 ops each, into 8
// int32 lanes; two scratch registers alternate). Ops per second.
#define TPSERVE_AVX2_PEAK(step, ops_per_step, clobbers...)                               \
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0,  \
         a7 = a0, a8 = a0, a9 = a0, a10 = a0, a11 = a0;                                  \
  const __m256 x = _mm256_set1_ps(1.0f), w = _mm256_set1_ps(0.0f);                       \
  const auto start = std::chrono::steady_clock::now();                                   \
  for (int64_t it = 0; it < iterations; ++it) {                                          \
    asm volatile(step(0, "14") step(1, "15") step(2, "14") step(3, "15") step(4, "14")    \
                 step(5, "15") step(6, "14") step(7, "15") step(8, "14") step(9, "15")    \
                 step(10, "14") step(11, "15")                                           \
                 : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(a4), "+x"(a5), "+x"(a6),  \
                   "+x"(a7), "+x"(a8), "+x"(a9), "+x"(a10), "+x"(a11)                    \
                 : "x"(x), "x"(w)                                                        \
                 : clobbers);                                                            \
  }                                                                                      \
  return 12.0 * (ops_per_step) * double(iterations) / Seconds(start);

#define TPSERVE_FMA_STEP(i, t) "vfmadd231ps %13, %12, %" #i "\n\t"
#define TPSERVE_MADD_STEP(i, t) \
  "vpmaddwd %13, %12, %%ymm" t "\n\tvpaddd %%ymm" t ", %" #i ", %" #i "\n\t"

double PeakFmaFlops(int64_t iterations) {
  TPSERVE_AVX2_PEAK(TPSERVE_FMA_STEP, 16.0, "xmm14", "xmm15")
}

double PeakMaddOps(int64_t iterations) {
  TPSERVE_AVX2_PEAK(TPSERVE_MADD_STEP, 32.0, "xmm14", "xmm15")
}

#undef TPSERVE_FMA_STEP
#undef TPSERVE_MADD_STEP
#undef TPSERVE_AVX2_PEAK

// The AVX2 kernel's passes (bf16_avx2.h), one thread, weight and x in cache (k = 2048, 6
// blocks), each the best of three: GFLOP/s and the share of the FMA probe `fma`. Passes
// MatMul's tile plans use: 6, 5 and 4 rows over one block, 3 and 2 over two, 2 over three.
void PrintCachedPasses(double fma) {
  constexpr int64_t kK = 2048, kRepeats = 400;
  const std::pair<int, int> passes[] = {{6, 1}, {5, 1}, {4, 1}, {3, 2}, {2, 2}, {2, 3}};
  std::printf("AVX2 kernel passes, one thread, in cache (k = %lld), GFLOP/s (of the FMA "
              "peak):", static_cast<long long>(kK));
  for (const auto& [rows, blocks] : passes) {
    double best = 0;
    for (int pass = 0; pass < 3; ++pass) {
      best = std::max(best, bf16_avx2::CachedPassFlops(rows, blocks, kK, kRepeats));
    }
    std::printf(" %d rows x %d block%s %.0f (%.0f%%)%s", rows, blocks, blocks > 1 ? "s" : "",
                best / 1e9, 100 * best / fma, blocks == 3 ? "" : ",");
  }
  std::printf("\n");
}

void PrintDotPeaks() {
  if (!__builtin_cpu_supports("avx512bf16") || !__builtin_cpu_supports("avx512vnni")) {
    double fma = 0, madd = 0;
    for (int pass = 0; pass < 3; ++pass) {  // best of three
      fma = std::max(fma, PeakFmaFlops(20'000'000));
      madd = std::max(madd, PeakMaddOps(20'000'000));
    }
    std::printf("no AVX512-BF16/VNNI; AVX2 peak, one thread, registers only: vfmadd231ps "
                "%.0f GFLOP/s, vpmaddwd+vpaddd %.0f GOP/s\n", fma / 1e9, madd / 1e9);
    PrintCachedPasses(fma);
    return;
  }
  constexpr int64_t kIterations = 20'000'000;
  double bf16 = 0, int16 = 0;
  for (int pass = 0; pass < 3; ++pass) {  // best of three
    bf16 = std::max(bf16, PeakBf16DotFlops(kIterations));
    int16 = std::max(int16, PeakInt16DotOps(kIterations));
  }
  std::printf("dot-product peak, one thread, registers only: vdpbf16ps %.0f GFLOP/s, "
              "vpdpwssd %.0f GOP/s\n", bf16 / 1e9, int16 / 1e9);
  if (bf16_amx::Available()) {
    double tile = 0;
    for (int pass = 0; pass < 3; ++pass) tile = std::max(tile, bf16_amx::PeakTileFlops(5'000'000));
    std::printf("AMX tile peak, one thread, registers only: tdpbf16ps %.0f GFLOP/s\n", tile / 1e9);
    PrintCachedTileLoops();
  }
}

// Best of three passes of `threads` threads summing their share of a 1 GiB buffer, each
// reading its share as 8 interleaved streams (as a GEMM reads several weight rows at
// once; one stream alone gets less from the prefetchers).
double ReadBandwidth(int threads) {
  constexpr int kStreams = 8, kLanes = 16;
  std::vector<float> buffer(kGiB / sizeof(float), 1.0f);
  const int64_t stream_floats = static_cast<int64_t>(buffer.size()) / threads / kStreams;
  std::vector<double> sums(threads);
  double best = 0;
  for (int pass = 0; pass < 3; ++pass) {
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        float acc[kLanes] = {0};
        const float* base = buffer.data() + t * kStreams * stream_floats;
        for (int64_t i = 0; i + kLanes <= stream_floats; i += kLanes) {
          for (int s = 0; s < kStreams; ++s) {
            const float* p = base + s * stream_floats + i;
            for (int j = 0; j < kLanes; ++j) acc[j] += p[j];
          }
        }
        for (float a : acc) sums[t] += a;
      });
    }
    for (std::thread& t : pool) t.join();
    best = std::max(best, kGiB / Seconds(start) / 1e9);
  }
  return sums[0] > 0 ? best : 0;
}

std::vector<double> PrintReadBandwidth(const char* when, const std::vector<int32_t>& threads) {
  std::printf("memory read bandwidth %s (1 GiB, 8 streams a thread):", when);
  std::vector<double> bandwidth;
  for (int t : threads) {
    bandwidth.push_back(ReadBandwidth(t));
    std::printf("  %d thread(s) %.1f GB/s", t, bandwidth.back());
  }
  std::printf("\n");
  return bandwidth;
}

// Seconds per call of `call(copy)`, cycling through `copies` weight copies, after one
// warm-up call (which makes the primitives): the best of three batches, each of at
// least two calls and `min_seconds` / 3, so that a burst of load on a shared host
// counts against one batch only.
template <typename Call>
double TimePerCall(int copies, double min_seconds, Call call) {
  call(0);
  double best = 1e30;
  for (int batch = 0, copy = 0; batch < 3; ++batch) {
    int calls = 0;
    const auto start = std::chrono::steady_clock::now();
    while (calls < 2 || Seconds(start) < min_seconds / 3) {
      call(++copy % copies);
      ++calls;
    }
    best = std::min(best, Seconds(start) / calls);
  }
  return best;
}

// The median over pairs of calls of time(a) / time(b), `a(copy)` and `b(copy)` called in
// turn on each copy (which goes first alternating), for at least `min_seconds` and 8
// pairs: a ratio that a slow spell of the host moves far less than two separate timings.
template <typename A, typename B>
double RatioInTurns(int copies, double min_seconds, A a, B b) {
  a(0);
  b(0);
  std::vector<double> ratios;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 8 || Seconds(start) < min_seconds; ++i) {
    const int copy = (i + 1) % copies;
    double ta = 0, tb = 0;
    for (int turn = 0; turn < 2; ++turn) {
      const auto t0 = std::chrono::steady_clock::now();
      if ((turn == 0) == (i % 2 == 0)) {
        a(copy);
        ta = Seconds(t0);
      } else {
        b(copy);
        tb = Seconds(t0);
      }
    }
    ratios.push_back(ta / tb);
  }
  std::nth_element(ratios.begin(), ratios.begin() + ratios.size() / 2, ratios.end());
  return ratios[ratios.size() / 2];
}

struct Flags {
  std::string threads = "1,2", rows = "1,8,32,64,512,2048", sets = "tiny,7b", max_isa;
  double min_seconds = 0.3;
};

absl::Status Run(const Flags& f) {
  std::vector<int32_t> thread_counts, row_counts;
  if (absl::Status s = ParseIdList(f.threads, &thread_counts); !s.ok()) return s;
  if (absl::Status s = ParseIdList(f.rows, &row_counts); !s.ok()) return s;
  if (f.max_isa == "avx2") dnnl::set_max_cpu_isa(dnnl::cpu_isa::avx2);
  if (f.max_isa == "avx512_core") dnnl::set_max_cpu_isa(dnnl::cpu_isa::avx512_core);
  // As on AVX512-BF16 without AMX (AMD Zen 4): oneDNN's brgemm without tiles, and the
  // project's vdpbf16ps kernel in the bf16 column.
  const Bf16Kernel own_kernel =
      f.max_isa == "avx512_core_bf16" ? Bf16Kernel::kAvx512Bf16 : Bf16Kernel::kOwn;
  if (f.max_isa == "avx512_core_bf16") dnnl::set_max_cpu_isa(dnnl::cpu_isa::avx512_core_bf16);
  SetBf16Kernel(own_kernel);
  if (f.max_isa == "avx2" || f.max_isa == "avx512_core") LimitInt8GemmIsa(Int8GemmIsa::kAvx2);
  PrintDotPeaks();
  const std::vector<double> bandwidth = PrintReadBandwidth("before", thread_counts);
  const int64_t max_rows = *std::max_element(row_counts.begin(), row_counts.end());
  int64_t max_k = 0, max_n_out = 0;
  for (const Layer& layer : kLayers) {
    max_k = std::max(max_k, layer.k);
    max_n_out = std::max(max_n_out, layer.n_out);
  }
  std::vector<float> x(max_rows * max_k), y(max_rows * max_n_out);  // [M, k], [M, n_out]
  std::mt19937 rng(1);
  std::normal_distribution<float> dist;
  for (float& v : x) v = dist(rng);
  std::printf("%-13s %11s %5s %3s | %9s %6s %7s | %9s %6s %7s | %5s %7s | %9s %6s %7s | %5s %7s\n",
              "layer", "n_out x k", "M", "thr", "bf16 ms", "wGB/s", "GFLOP/s", "fp32 ms", "wGB/s",
              "GFLOP/s", "gain", "floor", "int8 ms", "wGB/s", "GFLOP/s", "vbf16", "floor");
  const std::vector<std::string> sets = absl::StrSplit(f.sets, ',');
  for (const Layer& layer : kLayers) {
    if (std::find(sets.begin(), sets.end(), layer.set) == sets.end()) continue;
    const int64_t elements = layer.n_out * layer.k;
    const int copies = static_cast<int>(std::max<int64_t>(2, kGiB / (2 * elements)));
    std::vector<float> w(elements);
    for (float& v : w) v = dist(rng);
    std::vector<uint16_t> w_bf16(elements);
    FloatsToBf16(w.data(), w.size(), w_bf16.data());
    std::vector<PackedBf16Weight> packed;
    std::vector<Int8Weight> int8;
    std::vector<std::vector<float>> fp32(std::max(2, copies / 2), w);  // 1 GiB of fp32 too
    // On an AMX CPU `packed` is in the tile kernel's own layout, which oneDNN's matmul
    // does not read: `onednn` holds the same copies in oneDNN's layout, for its columns.
    std::vector<PackedBf16Weight> onednn;
    for (int c = 0; c < copies; ++c) {
      absl::StatusOr<PackedBf16Weight> p = PackedBf16Weight::FromBf16(w_bf16.data(), layer.n_out, layer.k);
      if (!p.ok()) return p.status();
      packed.push_back(*std::move(p));
      if (packed[0].runs_on_amx() && !packed[0].packed_for_onednn()) {
        SetBf16Kernel(Bf16Kernel::kOneDnn);
        p = PackedBf16Weight::FromBf16(w_bf16.data(), layer.n_out, layer.k);
        SetBf16Kernel(own_kernel);
        if (!p.ok()) return p.status();
        onednn.push_back(*std::move(p));
      }
      absl::StatusOr<Int8Weight> q = Int8Weight::QuantizeBf16(w_bf16.data(), layer.n_out, layer.k);
      if (!q.ok()) return q.status();
      int8.push_back(*std::move(q));
    }
    for (size_t ti = 0; ti < thread_counts.size(); ++ti) {
      SetBf16GemmThreads(thread_counts[ti]);
      SetGemmThreads(thread_counts[ti]);
      SetCpuThreads(thread_counts[ti]);  // the AVX2 and int8 kernels' threads
      for (int32_t m : row_counts) {
        absl::Status status;
        const double bf16_s = TimePerCall(copies, f.min_seconds, [&](int c) {
          status.Update(MatMulBf16(x.data(), m, packed[c], y.data()));
        });
        if (!status.ok()) return status;
        // Where the bf16 column is one of this project's kernels, oneDNN's own matmul is
        // timed beside on the weight in oneDNN's layout, and on an AMX CPU also the
        // AVX512-BF16 kernel, and the tile kernel on oneDNN's layout against its own.
        double onednn_s = 0, avx512_s = 0, layout_gain = 0;
        const bool own = packed[0].runs_on_amx() || packed[0].runs_on_avx512_bf16();
        const std::vector<PackedBf16Weight>& onednn_layout = onednn.empty() ? packed : onednn;
        auto time_kernel = [&](Bf16Kernel kernel) {
          SetBf16Kernel(kernel);
          const double s = TimePerCall(copies, f.min_seconds, [&](int c) {
            status.Update(MatMulBf16(x.data(), m, onednn_layout[c], y.data()));
          });
          SetBf16Kernel(own_kernel);
          return s;
        };
        if (own) onednn_s = time_kernel(Bf16Kernel::kOneDnn);
        if (packed[0].runs_on_amx()) avx512_s = time_kernel(Bf16Kernel::kAvx512Bf16);
        if (!onednn.empty()) {  // the tile kernel on both layouts, calls alternating
          layout_gain = RatioInTurns(copies, f.min_seconds, [&](int c) {
            status.Update(MatMulBf16(x.data(), m, onednn[c], y.data()));
          }, [&](int c) { status.Update(MatMulBf16(x.data(), m, packed[c], y.data())); });
        }
        if (!status.ok()) return status;
        const double fp32_s = TimePerCall(static_cast<int>(fp32.size()), f.min_seconds, [&](int c) {
          MatMulTransB(x.data(), fp32[c].data(), m, layer.k, layer.n_out, y.data());
        });
        const double int8_s = ti > 0 ? 0 : TimePerCall(copies, f.min_seconds, [&](int c) {
          status.Update(MatMulInt8(x.data(), m, int8[c], y.data()));
        });
        if (!status.ok()) return status;
        const double flop = 2.0 * m * elements;
        const bool compute_bound = m >= 32;
        auto gflops = [&](double s) {
          return compute_bound ? absl::StrFormat("%.0f", flop / s / 1e9) : std::string("-");
        };
        const std::string int8_columns =
            ti > 0 ? "" : absl::StrFormat("| %9.3f %6.1f %7s | %5.2f %7.3f", int8_s * 1e3,
                                          elements / int8_s / 1e9, gflops(int8_s),
                                          bf16_s / int8_s, elements / bandwidth[ti] / 1e6);
        std::string onednn_columns =
            onednn_s == 0 ? "" : absl::StrFormat("| oneDNN %8.3f ms %7s  ours x%.2f", onednn_s * 1e3,
                                                 gflops(onednn_s), onednn_s / bf16_s);
        if (avx512_s > 0) {
          onednn_columns += absl::StrFormat(" | vdpbf16ps kernel %8.3f ms %7s  x%.2f of oneDNN",
                                            avx512_s * 1e3, gflops(avx512_s), onednn_s / avx512_s);
        }
        if (layout_gain > 0) {
          onednn_columns += absl::StrFormat(" | tiles' layout x%.2f oneDNN's", layout_gain);
        }
        std::printf("%-13s %5ldx%-5ld %5d %3d | %9.3f %6.1f %7s | %9.3f %6.1f %7s | %5.2f %7.3f %s %s\n",
                    layer.name, long(layer.n_out), long(layer.k), m, thread_counts[ti],
                    bf16_s * 1e3, 2 * elements / bf16_s / 1e9, gflops(bf16_s).c_str(),
                    fp32_s * 1e3, 4 * elements / fp32_s / 1e9, gflops(fp32_s).c_str(),
                    fp32_s / bf16_s, 2 * elements / bandwidth[ti] / 1e6, int8_columns.c_str(),
                    onednn_columns.c_str());
      }
    }
    std::printf("  (%s: %s)\n", layer.name,
                !onednn.empty()                   ? "AMX kernel on its own tile-by-tile layout"
                : packed[0].runs_on_amx()         ? "AMX kernel on oneDNN's packed layout"
                : packed[0].runs_on_avx512_bf16() ? "vdpbf16ps kernel on oneDNN's packed layout"
                : packed[0].packed_for_onednn()   ? "oneDNN, packed"
                                                : "AVX2 kernel, 16-row blocks");
  }
  PrintReadBandwidth("after", thread_counts);
  return absl::OkStatus();
}

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) {
  const std::string openblas_note = tpserve::UseOpenBlasKernelsForThisCpu(argv);  // may re-execute
  if (!openblas_note.empty()) std::printf("%s\n", openblas_note.c_str());
  tpserve::Flags f;
  tpserve::ArgParser p("bf16_gemm_benchmark");
  p.AddString("threads", &f.threads, "thread counts to run, e.g. 1,2");
  p.AddString("rows", &f.rows, "row counts M to run, e.g. 1,8,32,64,512,2048");
  p.AddDouble("min-seconds", &f.min_seconds, "time each case for at least this long");
  p.AddString("sets", &f.sets, "layer shapes to run: tiny, tiny-tp2, 7b (default tiny,7b)");
  p.AddString("max-isa", &f.max_isa,
              "cap oneDNN's ISA (avx2 or avx512_core, with MatMulInt8's AVX2 kernel; or "
              "avx512_core_bf16: no AMX, the vdpbf16ps kernel in the bf16 column)");
  absl::Status s = ParseFlagsOrExit(p, argc, argv);
  if (s.ok()) s = tpserve::Run(f);
  if (!s.ok()) {
    std::fprintf(stderr, "bf16_gemm_benchmark: %s\n%s\n", std::string(s.message()).c_str(),
                 p.HelpHint().c_str());
    return 1;
  }
  return 0;
}
