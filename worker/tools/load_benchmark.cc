// load_benchmark: how long a rank takes to load a checkpoint (OpenModel + LoadModel at
// tp 1: headers validated, every tensor converted to the CPU weights' form (fp32, or bf16
// or int8 packed for the GEMM kernels) and cut into the layers' shards), beside a floor
// measured in the same run, reading the same files through read() from the page cache
// into one reused buffer.
//
//   bazel run -c opt //worker/tools:load_benchmark -- [--dir DIR] [--hidden 2048]
//       [--layers 16] [--vocab 32000] [--reps 3] [--dtype bfloat16] [--quantization int8]
//
// Writes a synthetic bf16 Llama-shaped checkpoint into --dir (kept; default: a temporary
// directory, removed afterwards), reads it once to warm the page cache, then loads it
// --reps times, each in a fresh child process (fork) so that every load pays for its own
// memory, as a starting worker does. Reports the median wall time, checkpoint GB/s, minor
// page faults and the load's peak RSS against the weights' bytes (CpuWeightBytes); the
// CUDA backend uploads the same host model, so its load starts with this.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/args.h"
#include "base/status_macros.h"
#include "worker/comm/local_comm_group.h"
#include "worker/models/llama_layers.h"
#include "worker/models/model_files.h"
#include "worker/tools/synthetic_checkpoint.h"

namespace tpserve {
namespace {

struct Flags {
  std::string dir;
  std::string dtype = "float32", quantization = "none";  // as model_benchmark's flags
  int64_t hidden = 2048, layers = 16, vocab = 32000, reps = 3;
};

double Since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Bytes of the checkpoint's files, and the seconds to read them all through read().
absl::StatusOr<std::pair<int64_t, double>> ReadFiles(const std::string& dir) {
  std::vector<char> buffer(64 << 20);
  int64_t bytes = 0;
  const auto start = std::chrono::steady_clock::now();
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".safetensors") continue;
    const int fd = ::open(entry.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return absl::InternalError(absl::StrCat(entry.path().string(), ": cannot open"));
    for (ssize_t got; (got = ::read(fd, buffer.data(), buffer.size())) > 0;) bytes += got;
    ::close(fd);
  }
  return std::make_pair(bytes, Since(start));
}

struct LoadResult {
  double seconds = 0;
  int64_t minor_faults = 0;
  int64_t peak_rss_bytes = 0;
  int ok = 0;
};

// One load in a fresh process.
absl::StatusOr<LoadResult> LoadInChild(const std::string& dir, CpuWeights weights) {
  int fds[2];
  if (::pipe(fds) != 0) return absl::InternalError("pipe failed");
  const pid_t pid = ::fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    ::close(fds[0]);
    LoadResult r;
    rusage before{}, after{};
    ::getrusage(RUSAGE_SELF, &before);
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<ModelFiles> files = OpenModel(dir, 1);
    std::vector<std::unique_ptr<LocalCommGroup>> comm = LocalCommGroup::Create(1);
    absl::Status s = files.status();
    if (s.ok()) s = LoadModel(*files, comm[0].get(), weights).status();
    r.seconds = Since(start);
    ::getrusage(RUSAGE_SELF, &after);
    r.minor_faults = after.ru_minflt - before.ru_minflt;
    r.peak_rss_bytes = int64_t{after.ru_maxrss} * 1024;  // the forked parent's pages count
    r.ok = s.ok();
    if (!s.ok()) std::fprintf(stderr, "load failed: %s\n", std::string(s.message()).c_str());
    const ssize_t wrote = ::write(fds[1], &r, sizeof(r));
    ::_exit(wrote == sizeof(r) && r.ok ? 0 : 1);
  }
  ::close(fds[1]);
  LoadResult r;
  const ssize_t got = ::read(fds[0], &r, sizeof(r));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (got != sizeof(r) || !r.ok || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError("the loading child failed");
  }
  return r;
}

absl::Status Run(const Flags& f, const std::string& dir) {
  TPSERVE_ASSIGN_OR_RETURN(const CpuWeights weights, ParseCpuWeights(f.dtype, f.quantization));
  SyntheticLlama spec;
  spec.hidden_size = static_cast<int>(f.hidden);
  spec.intermediate_size = static_cast<int>(f.hidden * 4);
  spec.num_layers = static_cast<int>(f.layers);
  spec.num_heads = static_cast<int>(f.hidden / 128);
  spec.num_kv_heads = std::max(1, spec.num_heads / 4);
  spec.vocab_size = static_cast<int>(f.vocab);
  spec.dtype = DType::kBF16;
  if (!std::filesystem::exists(std::filesystem::path(dir) / "config.json")) {
    TPSERVE_RETURN_IF_ERROR(WriteSyntheticLlama(dir, spec));
  }
  TPSERVE_ASSIGN_OR_RETURN(auto read, ReadFiles(dir));  // warms the page cache
  std::vector<double> read_s, load_s, faults, rss;
  for (int rep = 0; rep < f.reps; ++rep) {
    TPSERVE_ASSIGN_OR_RETURN(read, ReadFiles(dir));
    read_s.push_back(read.second);
    TPSERVE_ASSIGN_OR_RETURN(LoadResult load, LoadInChild(dir, weights));
    load_s.push_back(load.seconds);
    faults.push_back(static_cast<double>(load.minor_faults));
    rss.push_back(static_cast<double>(load.peak_rss_bytes));
  }
  const double gb = read.first / 1e9, load = Median(load_s), floor = Median(read_s);
  TPSERVE_ASSIGN_OR_RETURN(const ModelFiles files, OpenModel(dir, 1));
  const double weight_mib = CpuWeightBytes(files.config, 1, weights) / 1048576.0;
  std::printf("checkpoint: %.2fB parameters, bf16, %.2f GB (hidden %d, %d layers, vocab %d); "
              "loaded as %s / %s, %.1f MiB of weights\n",
              spec.NumParameters() / 1e9, gb, spec.hidden_size, spec.num_layers,
              spec.vocab_size, f.dtype.c_str(), f.quantization.c_str(), weight_mib);
  std::printf("| load s | load GB/s | read() floor s | floor GB/s | load / floor | minor faults "
              "| peak RSS MiB | / weights |\n");
  const double peak_mib = Median(rss) / 1048576.0;
  std::printf("| %.2f | %.2f | %.2f | %.2f | %.2fx | %.0f | %.1f | %.3fx |\n", load, gb / load,
              floor, gb / floor, load / floor, Median(faults), peak_mib, peak_mib / weight_mib);
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  Flags f;
  ArgParser p("load_benchmark");
  p.AddString("dir", &f.dir, "where to write the checkpoint (kept; default: a temporary "
              "directory, removed afterwards)");
  p.AddInt("hidden", &f.hidden, "hidden size, a multiple of 128 (default 2048)");
  p.AddInt("layers", &f.layers, "decoder layers (default 16)");
  p.AddInt("vocab", &f.vocab, "vocab size (default 32000)");
  p.AddString("dtype", &f.dtype, "float32 (default) or bfloat16: the CPU weights' form");
  p.AddString("quantization", &f.quantization, "none (default) or int8");
  p.AddInt("reps", &f.reps, "loads, each in a fresh process; the median is reported (default 3)");
  absl::Status s = ParseFlagsOrExit(p, argc, argv);
  if (s.ok() && (f.hidden < 128 || f.hidden % 128 != 0 || f.layers < 1 || f.vocab < 1 ||
                 f.reps < 1)) {
    s = absl::InvalidArgumentError("--hidden must be a multiple of 128; --layers, --vocab, "
                                   "--reps ≥ 1");
  }
  if (s.ok()) s = ParseCpuWeights(f.dtype, f.quantization).status();
  if (!s.ok()) {
    std::fprintf(stderr, "load_benchmark: %s\n%s\n", std::string(s.message()).c_str(),
                 p.HelpHint().c_str());
    return 2;
  }
  std::string dir = f.dir;
  if (dir.empty()) {
    char tmpl[] = "/tmp/load_benchmark_XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return 1;
    dir = tmpl;
  }
  s = Run(f, dir);
  if (f.dir.empty()) std::filesystem::remove_all(dir);
  if (!s.ok()) {
    std::fprintf(stderr, "load_benchmark: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) { return tpserve::Main(argc, argv); }
