// int8_avx512_benchmark: the AVX512-VNNI int8 kernel's plans (int8_avx512::Plan) side by
// side, calls in turn, on the four GEMMs of one TinyLlama-1.1B layer (qkv, o, gate_up,
// down) run one after another as a decode step runs them.
//
//   bazel build -c opt //worker/kernels/cpu:int8_avx512_benchmark
//   bazel-bin/worker/kernels/cpu/int8_avx512_benchmark [--rows 1,4,6,7,8,16,32]
//       [--min-rows-ahead 6,9] [--threads 2] [--min-seconds 2] [--cached]
//
// Each --min-rows-ahead value is a plan (passes of that many rows or more ask for their
// weight lines ahead; 9 never does). The weights, on huge pages as a model's are, are
// copied until the copies fill about 1 GiB and every call reads the next copy, so each
// call streams its weights from memory as a model step does; the threads split each
// GEMM's output blocks as MatMulInt8 does (ParallelChunks). Per row count the plans are
// called in turn, the first plan rotating, for at least --min-seconds: a slow spell of a
// shared host meets every plan alike. Printed: each plan's median ms per call (the four
// GEMMs), its weight bytes over that time, and the median over rounds of its time over
// the first plan's. --cached instead times one thread on two blocks at k = 2,048 in L2,
// the default plan, in GOP/s: beside the vpdpwssd peak (bf16_gemm_benchmark prints it),
// what a pass's loads leave of it, apart from memory. Needs AVX512-VNNI.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "base/args.h"
#include "worker/kernels/cpu/cpu_threads.h"
#include "worker/kernels/cpu/in_turns.h"
#include "worker/kernels/cpu/int8_avx512.h"
#include "worker/tensor.h"

namespace tpserve {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;
constexpr int64_t kB = int8_avx512::kBlockOutputs;

struct Shape {
  const char* name;
  int64_t n_out, k;
};
constexpr Shape kShapes[] = {
    {"qkv", 2048 + 2 * 256, 2048}, {"o", 2048, 2048}, {"gate_up", 2 * 5632, 2048},
    {"down", 2048, 5632}};

int64_t Blocks(const Shape& s) { return (s.n_out + kB - 1) / kB; }
int64_t Bytes(const Shape& s) { return Blocks(s) * kB * s.k; }  // k: a multiple of 32

struct Flags {
  std::string rows = "1,4,6,7,8,16,32", min_rows_ahead = "6,9";
  int64_t threads = 2;
  double min_seconds = 2;
  bool cached = false;
};

// Random int8 weights and int16 x: the kernel's speed does not depend on the values.
void Fill(int8_t* w, int64_t n, std::vector<int16_t>& x) {
  std::mt19937 rng(1);
  for (int64_t i = 0; i < n; ++i) w[i] = static_cast<int8_t>(rng() % 255 - 127);
  for (int16_t& v : x) v = static_cast<int16_t>(rng() % 65535 - 32767);
}

absl::Status RunCached(const std::vector<int32_t>& row_counts, double min_seconds) {
  constexpr int64_t kK = 2048, kBlocks = 2;
  const int32_t max_rows = *std::max_element(row_counts.begin(), row_counts.end());
  std::vector<int8_t> w(kBlocks * kB * kK);
  std::vector<int16_t> x(int64_t{max_rows} * kK);
  Fill(w.data(), static_cast<int64_t>(w.size()), x);
  float sink = 0;
  std::printf("in cache, one thread (k = %lld, %lld outputs): GOP/s\n",
              static_cast<long long>(kK), static_cast<long long>(kBlocks * kB));
  for (int32_t m : row_counts) {
    const double best = 2.0 * m * kK * kBlocks * kB * BestCallsPerSecond(min_seconds, [&] {
      int8_avx512::MatMulBlocks(x.data(), m, kK, w.data(), 0, kBlocks,
                                [&](int64_t, int64_t, int, const float* s) { sink += s[0]; });
    });
    std::printf("%5d | %7.1f\n", m, best / 1e9);
  }
  return sink == 0.5f ? absl::InternalError("unlikely") : absl::OkStatus();
}

absl::Status Run(const Flags& f) {
  if (!int8_avx512::Available()) return absl::FailedPreconditionError("no AVX512-VNNI here");
  std::vector<int32_t> row_counts, aheads;
  if (absl::Status s = ParseIdList(f.rows, &row_counts); !s.ok()) return s;
  if (absl::Status s = ParseIdList(f.min_rows_ahead, &aheads); !s.ok()) return s;
  if (row_counts.empty() || aheads.empty()) {
    return absl::InvalidArgumentError("--rows and --min-rows-ahead need a value each");
  }
  for (int32_t m : row_counts) {
    if (m < 1) return absl::InvalidArgumentError("--rows needs values of 1 or more");
  }
  if (f.threads < 1) return absl::InvalidArgumentError("--threads needs at least 1");
  if (f.cached) return RunCached(row_counts, f.min_seconds);
  // One set: the four weights, packed; `sets` copies of it fill about 1 GiB.
  std::vector<int64_t> offsets;
  int64_t set_bytes = 0;
  for (const Shape& s : kShapes) {
    offsets.push_back(set_bytes);
    set_bytes += Bytes(s);
  }
  const int64_t sets = std::max<int64_t>(2, kGiB / set_bytes);
  // On huge pages and 64-byte aligned, as a model's weights are (int8_gemm.cc).
  std::unique_ptr<void, decltype(&std::free)> storage(AllocateZeroed(sets * set_bytes + 64),
                                                      &std::free);
  int8_t* w =
      reinterpret_cast<int8_t*>((reinterpret_cast<uintptr_t>(storage.get()) + 63) / 64 * 64);
  const int32_t max_rows = *std::max_element(row_counts.begin(), row_counts.end());
  std::vector<int16_t> x(int64_t{max_rows} * 5632);  // the largest k
  Fill(w, set_bytes, x);
  for (int64_t c = 1; c < sets; ++c) std::copy(w, w + set_bytes, w + c * set_bytes);
  std::printf("%d copies of the four weights (%.0f MiB each), %ld thread(s)\n", int(sets),
              1.0 * set_bytes / (1 << 20), long(f.threads));
  std::printf("%5s", "rows");
  for (int32_t a : aheads) std::printf(" | ahead from %d rows: ms, GB/s, ratio", a);
  std::printf("\n");
  float sink = 0;
  for (int32_t m : row_counts) {
    auto step = [&](int32_t ahead, int64_t set) {
      for (size_t l = 0; l < std::size(kShapes); ++l) {
        const Shape& s = kShapes[l];
        const int8_t* packed = w + set * set_bytes + offsets[l];
        ParallelChunks(Blocks(s), /*min_chunk=*/2, static_cast<int>(f.threads),
                       [&](int64_t begin, int64_t end) {
                         float local = 0;
                         int8_avx512::MatMulBlocksIn(
                             int8_avx512::Plan{ahead}, x.data(), m, s.k, packed, begin, end,
                             [&](int64_t, int64_t, int, const float* sums) { local += sums[0]; });
                         if (local == 0.5f) sink += local;  // keeps the sums live
                       });
      }
    };
    int64_t set = 0;
    const InTurns timed = TimeInTurns(aheads.size(), f.min_seconds,
                                      [&](size_t p) { step(aheads[p], set++ % sets); });
    std::printf("%5d", m);
    for (size_t p = 0; p < aheads.size(); ++p) {
      const double ms = timed.seconds[p] * 1e3;
      std::printf(" | %8.3f %5.1f %9.3f", ms, set_bytes / ms / 1e6, timed.ratio[p]);
    }
    std::printf("\n");
  }
  return sink == 1.0f ? absl::InternalError("unlikely") : absl::OkStatus();
}

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) {
  tpserve::Flags f;
  tpserve::ArgParser p("int8_avx512_benchmark");
  p.AddString("rows", &f.rows, "row counts to run, e.g. 1,4,8,16");
  p.AddString("min-rows-ahead", &f.min_rows_ahead,
              "a plan for each value: passes of this many rows or more ask ahead (9: never)");
  p.AddInt("threads", &f.threads, "threads splitting each GEMM's output blocks");
  p.AddBool("cached", &f.cached, "time the kernel on weights in cache instead (one thread)");
  p.AddDouble("min-seconds", &f.min_seconds, "run each row count's rounds this long");
  absl::Status s = tpserve::ParseFlagsOrExit(p, argc, argv);
  if (s.ok()) s = tpserve::Run(f);
  if (!s.ok()) {
    std::fprintf(stderr, "int8_avx512_benchmark: %s\n%s\n", std::string(s.message()).c_str(),
                 p.HelpHint().c_str());
    return 1;
  }
  return 0;
}
