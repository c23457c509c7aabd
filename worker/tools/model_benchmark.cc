// model_benchmark: prefill and decode throughput of the CPU model core at several tp
// sizes on a synthetic Llama-shaped checkpoint, beside this machine's measured memory
// bandwidth and the decode floor it implies (weight bytes per step / bandwidth), with
// each rank's peak resident set beside the weight and KV bytes it holds.
//
//   bazel run -c opt //worker/tools:model_benchmark -- [--tp 1,2] [--prompt-len 128]
//       [--prefill-seqs 1] [--prefill-runs 3] [--decode-steps 32] [--batches 1,8,32] [--layers 8] [--hidden 768]
//       [--intermediate N] [--heads N] [--kv-heads N] [--vocab 32000] [--dtype bfloat16]
//       [--quantization int8]
//       [--dir DIR]
//
// The coordinator writes the checkpoint once (or, with --dir, finds it there from an
// earlier run of the same shape), then for each tp re-executes itself as
// that many rank processes over Gloo (as the forward tool does); rank 0 reports. A
// decode step at batch B runs B sequences, each at the prompt's context length and
// growing by one token per step (their cached keys and values are zeros: the cost of a
// step does not depend on them).
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/args.h"
#include "base/regular_file.h"
#include "base/status_macros.h"
#include "base/subprocess.h"
#include "worker/comm/gloo_comm_group.h"
#include "worker/comm/rank_launcher.h"
#include "worker/kernels/cpu/bf16_gemm.h"
#include "worker/kernels/cpu/cpu_threads.h"
#include "worker/kernels/cpu/gemm.h"
#include "worker/kernels/cpu/openblas_core.h"
#include "worker/models/llama_tensors.h"
#include "worker/tensor.h"
#include "worker/tools/forward_lib.h"
#include "worker/tools/membw.h"
#include "worker/tools/synthetic_checkpoint.h"

namespace tpserve {
namespace {

struct Flags {
  std::string tp = "1,2", dir;  // empty: a fresh temporary directory, removed at the end
  std::string batches = "1";
  int64_t prompt_len = 128, prefill_seqs = 1, prefill_runs = 3, decode_steps = 32, layers = 8, hidden = 768, vocab = 32000;
  int64_t intermediate = 0, heads = 0, kv_heads = 0;  // 0: derived from hidden
  int64_t rank = -1, tp_size = 1, store_port = 0;
  int64_t threads = 1;  // compute threads per rank
  bool tcp_only = false;  // collectives over Gloo's TCP even on one host
  std::string dtype = "float32";  // or bfloat16: the layers' weights in bf16
  std::string quantization = "none";  // or int8: the linears and LM head in int8 (bf16 mode)
};

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// This process's peak resident set (VmHWM) in bytes, or -1.
int64_t PeakRssBytes() {
  std::FILE* status = std::fopen("/proc/self/status", "r");
  if (status == nullptr) return -1;
  char line[256];
  long long kb = -1;
  while (std::fgets(line, sizeof(line), status) != nullptr) {
    if (std::sscanf(line, "VmHWM: %lld kB", &kb) == 1) break;
  }
  std::fclose(status);
  return kb < 0 ? -1 : kb * 1024;
}

absl::Status RunRank(const Flags& f) {
  SetGemmThreads(static_cast<int>(f.threads));
  SetBf16GemmThreads(static_cast<int>(f.threads));
  SetCpuThreads(static_cast<int>(f.threads));
  std::vector<int32_t> batches;
  TPSERVE_RETURN_IF_ERROR(ParseIdList(f.batches, &batches));
  int max_batch = static_cast<int>(f.prefill_seqs);
  for (int b : batches) max_batch = std::max(max_batch, b);
  GlooOptions options;
  options.rank = static_cast<int>(f.rank);
  options.size = static_cast<int>(f.tp_size);
  options.store_port = static_cast<int>(f.store_port);
  options.prefix = "bench";
  options.connect_timeout = absl::Seconds(300);
  options.shared_memory = !f.tcp_only;
  TPSERVE_ASSIGN_OR_RETURN(auto comm, GlooCommGroup::Create(options));
  TPSERVE_ASSIGN_OR_RETURN(auto files, OpenModel(f.dir, static_cast<int>(f.tp_size)));
  TPSERVE_ASSIGN_OR_RETURN(const CpuWeights weights, ParseCpuWeights(f.dtype, f.quantization));
  TPSERVE_ASSIGN_OR_RETURN(auto model, LoadModel(files, comm.get(), weights));
  const int64_t weight_bytes =
      CpuWeightBytes(files.config, static_cast<int>(f.tp_size), weights);
  const int64_t load_peak = PeakRssBytes();
  files.checkpoint.reset();  // as a worker does once loaded
  const int block = 16;
  const int total = static_cast<int>(f.prompt_len + f.decode_steps);
  const int blocks_per_seq = (total + block - 1) / block;
  TPSERVE_ASSIGN_OR_RETURN(
      auto cache, KvCache::Create(model->CacheShape(blocks_per_seq * max_batch, block,
                                                    LoadsBf16(weights) ? 2 : 4),  // as served
                                  1LL << 36));
  std::vector<std::vector<int32_t>> tables(max_batch);  // sequence i: its own blocks
  for (int i = 0; i < max_batch; ++i) {
    for (int b = 0; b < blocks_per_seq; ++b) tables[i].push_back(i * blocks_per_seq + b);
  }
  // --prefill-seqs prompts of --prompt-len tokens in one step, as a server's step carries
  // the prompts that arrived together.
  StepBatch prefill;
  for (int64_t q = 0; q < f.prefill_seqs; ++q) {
    for (int64_t i = 0; i < f.prompt_len; ++i) {
      prefill.token_ids.push_back(static_cast<int32_t>((i * 7919 + q * 104729) % f.vocab));
    }
    prefill.seqs.push_back({static_cast<int32_t>(f.prompt_len),
                            static_cast<int32_t>(f.prompt_len), tables[q], false});
  }
  const double prefill_tokens = double(f.prompt_len) * f.prefill_seqs;
  // The first prefill also faults in the forward's scratch and the KV pages; a serving
  // worker pays that once, so the figure is the best of the runs after it.
  double cold_s = 0, prefill_s = 0;
  size_t fresh_before_warm = 0;  // tensor blocks of 1 MiB+ the warm runs took fresh
  for (int64_t run = 0; run <= f.prefill_runs; ++run) {
    TPSERVE_RETURN_IF_ERROR(comm->Barrier());
    if (run == 1) fresh_before_warm = RecycledTensorStorage().fresh_requests;
    const auto start = std::chrono::steady_clock::now();
    TPSERVE_ASSIGN_OR_RETURN(auto logits, model->Forward(prefill, cache));
    const double s = Seconds(start);
    if (run == 0) cold_s = s;
    else if (run == 1 || s < prefill_s) prefill_s = s;
  }
  if (f.prefill_runs == 0) prefill_s = cold_s;
  const double fresh_per_run =
      f.prefill_runs == 0
          ? 0
          : double(RecycledTensorStorage().fresh_requests - fresh_before_warm) / f.prefill_runs;
  // Forward's GEMM work in the prefill: 2 flops per weight per token (the head for one row
  // a sequence).
  const double head = double(files.config.vocab_size) * files.config.hidden_size;
  const double vocab_tables = files.config.tie_word_embeddings ? 1 : 2;  // embedding (+ head)
  const double layer_params =
      double(RankWeightBytes(files.config, 1, 1)) - vocab_tables * head;  // all ranks' layers
  const double prefill_gflops = 2.0 * layer_params * prefill_tokens / prefill_s / 1e9;
  if (f.rank == 0) {
    std::printf("RESULT tp=%lld prefill_tok_s=%.1f prefill_gemm_gflop_s=%.1f "
                "cold_prefill_tok_s=%.1f fresh_blocks_per_prefill=%.1f\n",
                static_cast<long long>(f.tp_size), prefill_tokens / prefill_s, prefill_gflops,
                prefill_tokens / cold_s, fresh_per_run);
  }
  for (int batch : batches) {
    TPSERVE_RETURN_IF_ERROR(comm->Barrier());
    const auto start = std::chrono::steady_clock::now();
    for (int step = 0; step < f.decode_steps; ++step) {
      StepBatch decode;
      for (int i = 0; i < batch; ++i) {
        decode.token_ids.push_back(static_cast<int32_t>((step * 31 + i * 17) % f.vocab));
        decode.seqs.push_back(
            {1, static_cast<int32_t>(f.prompt_len + step + 1), tables[i], false});
      }
      TPSERVE_ASSIGN_OR_RETURN(auto out, model->Forward(decode, cache));
    }
    const double decode_s = Seconds(start);
    if (f.rank == 0) {
      std::printf("RESULT tp=%lld batch=%d decode_ms=%.2f decode_tok_s=%.2f\n",
                  static_cast<long long>(f.tp_size), batch, 1e3 * decode_s / f.decode_steps,
                  batch * f.decode_steps / decode_s);
    }
  }
  std::fflush(stdout);
  TPSERVE_RETURN_IF_ERROR(comm->Barrier());
  // Every rank reports its memory, in rank order.
  for (int r = 0; r < f.tp_size; ++r) {
    if (r == f.rank) {
      std::printf("MEMORY tp=%lld rank=%lld weights_MiB=%.1f kv_MiB=%.1f load_peak_rss_MiB=%.1f "
                  "peak_rss_MiB=%.1f (%.3fx weights+kv)\n",
                  static_cast<long long>(f.tp_size), static_cast<long long>(f.rank),
                  weight_bytes / 1048576.0, cache.shape().bytes() / 1048576.0, load_peak / 1048576.0,
                  PeakRssBytes() / 1048576.0,
                  double(PeakRssBytes()) / double(weight_bytes + cache.shape().bytes()));
      std::fflush(stdout);
    }
    TPSERVE_RETURN_IF_ERROR(comm->Barrier());
  }
  return absl::OkStatus();
}

absl::Status RunPool(const Flags& f, int tp) {
  TPSERVE_ASSIGN_OR_RETURN(std::string self, SelfExecutable());
  return RunLocalRanks(tp, [&](int rank, int store_port) {
    std::vector<std::string> argv = {self,
                                     "--dir",
                                     f.dir,
                                     "--rank",
                                     std::to_string(rank),
                                     "--tp-size",
                                     std::to_string(tp),
                                     "--store-port",
                                     std::to_string(store_port),
                                     "--prompt-len",
                                     std::to_string(f.prompt_len),
                                     "--prefill-seqs",
                                     std::to_string(f.prefill_seqs),
                                     "--prefill-runs",
                                     std::to_string(f.prefill_runs),
                                     "--decode-steps",
                                     std::to_string(f.decode_steps),
                                     "--vocab",
                                     std::to_string(f.vocab),
                                     "--batches",
                                     f.batches};
    if (f.tcp_only) argv.push_back("--tcp-only");
    argv.push_back("--threads");
    argv.push_back(std::to_string(f.threads));
    argv.push_back("--dtype");
    argv.push_back(f.dtype);
    argv.push_back("--quantization");
    argv.push_back(f.quantization);
    return argv;
  });
}

// The checkpoint's spec as one line, written beside it (kSpecFile) once it is complete:
// a later run with the same --dir and the same shape reads the files already there
// instead of writing them again (gigabytes of random weights: a third of a run's time on
// the 1.1B shape). The line is removed before any file is written, so a run stopped
// halfway leaves nothing that a later run would reuse.
constexpr char kSpecFile[] = ".model_benchmark_spec";

std::string SpecLine(const SyntheticLlama& s) {
  return absl::StrFormat(
      "hidden %d intermediate %d layers %d heads %d/%d vocab %d positions %d tied %d "
      "dtype %s shards %d seed %u\n",
      s.hidden_size, s.intermediate_size, s.num_layers, s.num_heads, s.num_kv_heads,
      s.vocab_size, s.max_position_embeddings, s.tie_word_embeddings ? 1 : 0,
      DTypeName(s.dtype), s.num_shards, s.seed);
}

absl::Status WriteOrReuseCheckpoint(const std::string& dir, const SyntheticLlama& spec) {
  const std::filesystem::path marker = std::filesystem::path(dir) / kSpecFile;
  const std::string line = SpecLine(spec);
  const absl::StatusOr<std::string> old = ReadRegularFile(marker.string(), 4096);
  std::error_code ec;
  if (old.ok() && *old == line &&
      std::filesystem::exists(std::filesystem::path(dir) / "config.json", ec)) {
    std::printf("reusing the checkpoint in %s (%s)\n", dir.c_str(), kSpecFile);
    return absl::OkStatus();
  }
  std::filesystem::remove(marker, ec);
  TPSERVE_RETURN_IF_ERROR(WriteSyntheticLlama(dir, spec));
  std::ofstream out(marker);
  out << line;
  if (!out.flush()) return absl::InternalError(absl::StrCat("writing ", marker.string()));
  return absl::OkStatus();
}

absl::Status Coordinate(const Flags& f) {
  SyntheticLlama spec;
  spec.hidden_size = static_cast<int>(f.hidden);
  spec.intermediate_size =
      static_cast<int>(f.intermediate > 0 ? f.intermediate : f.hidden * 8 / 3 / 64 * 64);
  spec.num_layers = static_cast<int>(f.layers);
  spec.num_heads = static_cast<int>(f.heads > 0 ? f.heads : f.hidden / 64);
  spec.num_kv_heads = static_cast<int>(
      f.kv_heads > 0 ? f.kv_heads : (spec.num_heads / 3 > 0 ? spec.num_heads / 3 : 1));
  spec.dtype = DType::kBF16;  // as real checkpoints are; float32 runs widen it at load
  spec.vocab_size = static_cast<int>(f.vocab);
  TPSERVE_RETURN_IF_ERROR(WriteOrReuseCheckpoint(f.dir, spec));
  const double params = static_cast<double>(spec.NumParameters());
  // A decode step reads every weight once, except that only one embedding row is read;
  // in bf16 mode the layers' and the LM head's weights are 2 bytes each, with int8 one.
  const double head = double(spec.vocab_size) * spec.hidden_size;
  const bool int8 = f.quantization == "int8";
  const double step_bytes = (int8 ? 1.0 : f.dtype == "bfloat16" ? 2.0 : 4.0) * (params - head);
  std::printf("model: %.1fM parameters (hidden %d, %d layers, heads %d/%d, intermediate %d, "
              "vocab %d), %s layer weights, decode reads %.0f MB/step\n",
              params / 1e6, spec.hidden_size, spec.num_layers, spec.num_heads,
              spec.num_kv_heads, spec.intermediate_size, spec.vocab_size,
              int8 ? "int8" : f.dtype.c_str(), step_bytes / 1e6);
  std::vector<int32_t> tps;
  TPSERVE_RETURN_IF_ERROR(ParseIdList(f.tp, &tps));
  for (int tp : tps) {
    // Read by as many threads as the ranks compute with: one thread alone reads at about
    // half the machine's rate on some hosts (Zen 2), and the floor would be twice too low.
    const int readers = tp * static_cast<int>(f.threads);
    const double bw = MeasureReadBandwidth(readers, 256 << 20, 5);
    const double floor_ms = 1e3 * step_bytes / (bw * 1e9);
    std::printf("BANDWIDTH tp=%d read_GB_s=%.2f decode_floor_ms=%.2f (%.1f tok/s) threads=%d\n",
                tp, bw, floor_ms, 1e3 / floor_ms, readers);
    std::fflush(stdout);
    TPSERVE_RETURN_IF_ERROR(RunPool(f, tp));
  }
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  const std::string openblas_note = UseOpenBlasKernelsForThisCpu(argv);  // may re-execute
  if (!openblas_note.empty()) std::fprintf(stderr, "model_benchmark: %s\n", openblas_note.c_str());
  Flags f;
  ArgParser p("model_benchmark");
  p.AddString("tp", &f.tp, "comma-separated tp sizes to measure (default 1,2)");
  p.AddString("dir", &f.dir, "where to write the synthetic checkpoint (kept, and reused by "
              "a later run of the same shape; default: a temporary directory, removed "
              "afterwards)");
  p.AddInt("prompt-len", &f.prompt_len, "prefill tokens (default 128)");
  p.AddInt("prefill-seqs", &f.prefill_seqs,
           "prompts of --prompt-len tokens prefilled together in one step (default 1)");
  p.AddInt("prefill-runs", &f.prefill_runs,
           "timed prefills after the first (cold) one; the best is reported (default 3)");
  p.AddString("dtype", &f.dtype,
              "float32 (default) or bfloat16 (the layers' weights in bf16, fp32 compute)");
  p.AddString("quantization", &f.quantization,
              "none (default) or int8 (linears and LM head in int8 per output channel, the "
              "embedding table in bf16, whatever --dtype)");
  p.AddInt("decode-steps", &f.decode_steps, "decode steps per batch size (default 32)");
  p.AddString("batches", &f.batches, "comma-separated decode batch sizes (default 1)");
  p.AddInt("intermediate", &f.intermediate, "MLP size (default hidden*8/3, rounded to 64)");
  p.AddInt("heads", &f.heads, "attention heads (default hidden/64)");
  p.AddInt("kv-heads", &f.kv_heads, "key/value heads (default heads/3)");
  p.AddInt("layers", &f.layers, "decoder layers (default 8)");
  p.AddInt("hidden", &f.hidden, "hidden size, a multiple of 64 (default 768)");
  p.AddInt("vocab", &f.vocab, "vocab size (default 32000)");
  p.AddInt("threads", &f.threads, "compute threads per rank (default 1)");
  p.AddBool("tcp-only", &f.tcp_only,
            "ranks' collectives over Gloo's TCP transport, not shared memory");
  p.AddInt("rank", &f.rank, "internal");
  p.AddInt("tp-size", &f.tp_size, "internal");
  p.AddInt("store-port", &f.store_port, "internal");
  if (absl::Status s = ParseFlagsOrExit(p, argc, argv); !s.ok()) {
    std::fprintf(stderr, "%s\n%s\n", std::string(s.message()).c_str(), p.HelpHint().c_str());
    return 2;
  }
  if (f.dtype != "float32" && f.dtype != "bfloat16") {
    std::fprintf(stderr, "model_benchmark: --dtype must be float32 or bfloat16, got %s\n",
                 f.dtype.c_str());
    return 2;
  }
  if (f.prompt_len < 1 || f.prefill_seqs < 1 || f.prefill_runs < 0 || f.decode_steps < 1) {
    std::fprintf(stderr, "model_benchmark: --prompt-len, --prefill-seqs and --decode-steps "
                 "must be >= 1, "
                 "--prefill-runs >= 0\n");
    return 2;
  }
  if (f.threads < 1 || f.threads > 1024) {
    std::fprintf(stderr, "model_benchmark: --threads must be in [1, 1024], got %lld\n",
                 static_cast<long long>(f.threads));
    return 2;
  }
  if (absl::Status s = ParseCpuWeights(f.dtype, f.quantization).status(); !s.ok()) {
    std::fprintf(stderr, "model_benchmark: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  std::string temp_dir;
  if (f.rank < 0 && f.dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp != nullptr ? tmp : "/tmp") + "/tpserve_bench_XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) {
      std::fprintf(stderr, "model_benchmark: cannot create a temporary directory\n");
      return 1;
    }
    f.dir = temp_dir = pattern;
  }
  absl::Status s = f.rank >= 0 ? RunRank(f) : Coordinate(f);
  if (!temp_dir.empty()) std::filesystem::remove_all(temp_dir);
  if (!s.ok()) {
    std::fprintf(stderr, "model_benchmark: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) { return tpserve::Main(argc, argv); }
