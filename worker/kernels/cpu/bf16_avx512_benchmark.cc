// bf16_avx512_benchmark: the vdpbf16ps kernel's pass orders (bf16_avx512::Passes) side
// by side, calls in turn, on the four GEMMs of one TinyLlama-1.1B layer (qkv, o, gate_up,
// down) run one after another as a decode step runs them.
//
//   bazel build -c opt //worker/kernels/cpu:bf16_avx512_benchmark
//   bazel-bin/worker/kernels/cpu/bf16_avx512_benchmark [--rows 1,7,8,12,16,18,24,32]
//       [--chunks 0,16] [--min-runs 4] [--ask-ahead 0] [--max-passes 3]
//       [--min-chunked-rows 9] [--threads 2] [--min-seconds 2] [--block-outputs 48,64]
//       [--cached]
//
// Each chunk size c is the plan {chunk_blocks c, max_chunked_passes --max-passes,
// min_chunked_rows --min-chunked-rows}; 0 is every pass over the whole block in turn;
// each with every --min-runs value, the least run of output blocks a thread takes
// (ParallelChunks' min_chunk), every --ask-ahead value (1: Passes::ask_ahead, the
// prefetch the kernel dropped) and every --block-outputs layout (48: the kernel's own
// blocks, bf16_avx512::BlocksLayout; 64: oneDNN's). The defaults put the kernel's own plan
// (bf16_avx512::Passes()) beside whole passes. The weights, on huge pages as a model's
// are, are copied until the copies fill about 1 GiB and every call reads the next copy,
// so each call streams its weights from memory as a model step does. Per row count the
// plans are called in turn, the first plan rotating, for at least --min-seconds: a slow
// spell of a shared host meets every plan alike. Printed: each plan's median ms per call
// (the four GEMMs) and the median over rounds of its time over the first plan's. Needs
// AVX512-BF16.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "base/args.h"
#include "worker/dtype.h"
#include "worker/tensor.h"
#include "worker/kernels/cpu/bf16_amx.h"
#include "worker/kernels/cpu/bf16_avx512.h"
#include "worker/kernels/cpu/cpu_threads.h"
#include "worker/kernels/cpu/in_turns.h"

namespace tpserve {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

struct Shape {
  const char* name;
  int64_t n_out, k;
};
constexpr Shape kShapes[] = {
    {"qkv", 2048 + 2 * 256, 2048}, {"o", 2048, 2048}, {"gate_up", 2 * 5632, 2048},
    {"down", 2048, 5632}};

// 48 outputs a block: the kernel's own layout (bf16_avx512::BlocksLayout); 64: oneDNN's
// BA16a64b2a blocks (bf16_amx.h), k blocks inner in both.
bf16_amx::Layout BlockLayout(int64_t k, int64_t block_outputs) {
  if (block_outputs == 48) return bf16_avx512::BlocksLayout(k);
  bf16_amx::Layout layout;
  layout.block_outputs = 64;
  layout.k_block_stride = 64 * 32;
  layout.n_block_stride = bf16_amx::PaddedCols(k) / 32 * layout.k_block_stride;
  return layout;
}

struct Plan {
  bf16_avx512::Passes passes;
  int64_t min_run;  // ParallelChunks' least run of output blocks
  int64_t block_outputs;  // 48: bf16_avx512::BlocksLayout; 64: oneDNN's blocks
};

struct Flags {
  std::string rows = "1,7,8,12,16,18,24,32", chunks = "0,16", min_runs = "4",
              ask_ahead = "0", block_outputs = "48";
  int64_t max_passes = bf16_avx512::Passes().max_chunked_passes, threads = 2;
  int64_t min_chunked_rows = bf16_avx512::Passes().min_chunked_rows;
  double min_seconds = 2;
  bool cached = false;
};

// --cached: the kernel's own rate with its operands in cache, one thread, each row count
// the best of three: two blocks (of the first --block-outputs layout) at k = 2,048, in
// L2, called over and over with the default plan. Beside the vdpbf16ps peak
// (bf16_gemm_benchmark prints it) this shows what a pass's loads leave of the FMA rate,
// apart from memory.
absl::Status RunCached(const std::vector<int32_t>& row_counts, int64_t block_outputs,
                       double min_seconds) {
  constexpr int64_t kK = 2048, kBlocks = 2;
  const int64_t outputs = block_outputs * kBlocks;
  const bf16_amx::Layout layout = BlockLayout(kK, block_outputs);
  std::vector<uint16_t> w(kBlocks * layout.n_block_stride);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist;
  for (uint16_t& v : w) v = FloatToBf16(dist(rng) * 0.02f);
  const int32_t max_rows = *std::max_element(row_counts.begin(), row_counts.end());
  std::vector<float> x(int64_t{max_rows} * kK), y(int64_t{max_rows} * outputs);
  for (float& v : x) v = dist(rng);
  std::vector<uint16_t> xb(bf16_amx::PaddedRows(max_rows) * bf16_amx::PaddedCols(kK));
  std::printf("in cache, one thread (k = %lld, %lld outputs): GFLOP/s\n",
              static_cast<long long>(kK), static_cast<long long>(outputs));
  for (int32_t m : row_counts) {
    bf16_amx::PrepareX(x.data(), m, kK, xb.data());
    const double best = 2.0 * m * kK * outputs * BestCallsPerSecond(min_seconds, [&] {
      bf16_avx512::MatMulBlocks(xb.data(), m, kK, w.data(), layout, outputs, 0, kBlocks,
                                y.data(), false);
    });
    std::printf("%5d | %7.1f\n", m, best / 1e9);
  }
  return absl::OkStatus();
}

absl::Status Run(const Flags& f) {
  if (!bf16_avx512::Available()) return absl::FailedPreconditionError("no AVX512-BF16 here");
  std::vector<int32_t> row_counts, chunks;
  if (absl::Status s = ParseIdList(f.rows, &row_counts); !s.ok()) return s;
  if (absl::Status s = ParseIdList(f.chunks, &chunks); !s.ok()) return s;
  std::vector<int32_t> block_outputs;
  if (absl::Status s = ParseIdList(f.block_outputs, &block_outputs); !s.ok()) return s;
  if (row_counts.empty() || chunks.empty() || block_outputs.empty()) {
    return absl::InvalidArgumentError("--rows, --chunks and --block-outputs need a value each");
  }
  for (int32_t b : block_outputs) {
    if (b != 48 && b != 64) return absl::InvalidArgumentError("--block-outputs takes 48 or 64");
  }
  if (f.cached) return RunCached(row_counts, block_outputs[0], f.min_seconds);
  std::vector<int32_t> min_runs;
  if (absl::Status s = ParseIdList(f.min_runs, &min_runs); !s.ok()) return s;
  for (int32_t run : min_runs) {
    if (run < 1) return absl::InvalidArgumentError("--min-runs needs values of 1 or more");
  }
  std::vector<int32_t> aheads;
  if (absl::Status s = ParseIdList(f.ask_ahead, &aheads); !s.ok()) return s;
  if (f.threads < 1 || f.max_passes < 2 || f.max_passes > 8) {
    return absl::InvalidArgumentError("--threads needs at least 1, --max-passes 2 to 8");
  }
  // One set: the four weights, packed; `sets` copies of it fill about 1 GiB.
  std::vector<int64_t> offsets;
  int64_t set_elements = 0;
  for (const Shape& s : kShapes) {  // room for the larger of the two layouts
    offsets.push_back(set_elements);
    int64_t most = 0;
    for (int64_t b : {48, 64}) {
      const bf16_amx::Layout layout = BlockLayout(s.k, b);
      most = std::max(most, bf16_amx::NumBlocks(s.n_out, layout) * layout.n_block_stride);
    }
    set_elements += most;
  }
  const int64_t sets = std::max<int64_t>(2, kGiB / (2 * set_elements));
  // On huge pages and 64-byte aligned, as a model's packed weights are (bf16_gemm.cc).
  std::unique_ptr<void, decltype(&std::free)> storage(
      AllocateZeroed(sets * set_elements * 2 + 64), &std::free);
  uint16_t* w = reinterpret_cast<uint16_t*>(
      (reinterpret_cast<uintptr_t>(storage.get()) + 63) / 64 * 64);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist;
  for (int64_t i = 0; i < set_elements; ++i) w[i] = FloatToBf16(dist(rng) * 0.02f);
  for (int64_t c = 1; c < sets; ++c) std::copy(w, w + set_elements, w + c * set_elements);
  int64_t max_k = 0, max_n = 0;
  for (const Shape& s : kShapes) {
    max_k = std::max(max_k, s.k);
    max_n = std::max(max_n, s.n_out);
  }
  const int32_t max_rows = *std::max_element(row_counts.begin(), row_counts.end());
  std::vector<float> x(int64_t{max_rows} * max_k);
  for (float& v : x) v = dist(rng);
  std::vector<uint16_t> xb(bf16_amx::PaddedRows(max_rows) * bf16_amx::PaddedCols(max_k));
  std::vector<float> y(int64_t{max_rows} * max_n);
  std::printf("%d copies of the four weights (%.0f MiB each), %ld thread(s)\n", int(sets),
              2.0 * set_elements / (1 << 20), long(f.threads));
  std::vector<Plan> plans;
  std::printf("%5s", "rows");
  for (int32_t b : block_outputs) {
    for (int32_t ahead : aheads) {
      for (int32_t run : min_runs) {
        for (int32_t c : chunks) {
          plans.push_back({{c, f.max_passes, ahead != 0, f.min_chunked_rows}, run, b});
          std::printf(" | %d %srun %d chunk %2d: ms, ratio", b, ahead != 0 ? "ahead " : "",
                      run, c);
        }
      }
    }
  }
  std::printf("\n");
  for (int32_t m : row_counts) {
    auto step = [&](const Plan& plan, int64_t set) {
      for (size_t l = 0; l < std::size(kShapes); ++l) {
        const Shape& s = kShapes[l];
        const bf16_amx::Layout layout = BlockLayout(s.k, plan.block_outputs);
        const uint16_t* packed = w + set * set_elements + offsets[l];
        const int64_t blocks = bf16_amx::NumBlocks(s.n_out, layout);
        bf16_amx::PrepareX(x.data(), m, s.k, xb.data());
        ParallelChunks(blocks, plan.min_run, static_cast<int>(f.threads),
                       [&](int64_t begin, int64_t end) {
                         bf16_avx512::MatMulBlocksIn(plan.passes, xb.data(), m, s.k, packed, layout,
                                                     s.n_out, begin, end, y.data(), false);
                       });
      }
    };
    int64_t set = 0;
    const InTurns timed = TimeInTurns(plans.size(), f.min_seconds,
                                      [&](size_t p) { step(plans[p], set++ % sets); });
    std::printf("%5d", m);
    for (size_t p = 0; p < plans.size(); ++p) {
      std::printf(" | %8.3f %9.3f", timed.seconds[p] * 1e3, timed.ratio[p]);
    }
    std::printf("\n");
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) {
  tpserve::Flags f;
  tpserve::ArgParser p("bf16_avx512_benchmark");
  p.AddString("rows", &f.rows, "row counts to run, e.g. 1,7,8,12,16");
  p.AddString("chunks", &f.chunks, "k blocks a chunk for each plan (0: whole passes)");
  p.AddString("min-runs", &f.min_runs,
              "least runs of output blocks a thread takes (bf16_gemm.cc: 4), e.g. 4,1");
  p.AddString("ask-ahead", &f.ask_ahead,
              "0, 1 or 0,1: each pass also asks for its next k block (Passes::ask_ahead)");
  p.AddString("block-outputs", &f.block_outputs,
              "48 (the kernel's own blocks), 64 (oneDNN's) or 48,64");
  p.AddInt("min-chunked-rows", &f.min_chunked_rows, "chunk from this many rows");
  p.AddInt("max-passes", &f.max_passes, "chunk a block's passes up to this many (2 to 8)");
  p.AddInt("threads", &f.threads, "threads splitting each GEMM's output blocks");
  p.AddBool("cached", &f.cached, "time the kernel on weights in cache instead (one thread)");
  p.AddDouble("min-seconds", &f.min_seconds, "run each row count's rounds this long");
  absl::Status s = tpserve::ParseFlagsOrExit(p, argc, argv);
  if (s.ok()) s = tpserve::Run(f);
  if (!s.ok()) {
    std::fprintf(stderr, "bf16_avx512_benchmark: %s\n%s\n", std::string(s.message()).c_str(),
                 p.HelpHint().c_str());
    return 1;
  }
  return 0;
}
