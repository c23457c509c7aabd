// forward: runs token ids through a Hugging Face checkpoint on N ranks and writes the
// fp32 logits of every position as .npy [num_tokens, vocab_size].
//
//   forward --model DIR --tp N --token-ids 1,2,3 --output logits.npy [--incremental]
//           [--device cpu|cuda] [--dtype float32|bfloat16] [--quantization none|int8]
//
// The invoking process is the coordinator: it validates the model, owns the rendezvous
// store, and re-executes itself once per rank (--rank). CPU ranks talk through Gloo;
// CUDA ranks (rank r on GPU r) through NCCL, computing in --dtype (default float32, the
// precision of the goldens). --quantization int8 (cpu) loads the linears and the LM head
// as int8 per output channel, as `tpserve --quantization int8` does. Rank 0 writes the
// output. Any failure exits non-zero with a message naming its cause.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/args.h"
#include "base/status_macros.h"
#include "base/subprocess.h"
#include "worker/comm/gloo_comm_group.h"
#include "worker/comm/rank_launcher.h"
#include "worker/kernels/cpu/bf16_gemm.h"
#include "worker/kernels/cpu/gemm.h"
#include "worker/kernels/cpu/openblas_core.h"
#include "worker/loader/npy.h"
#include "worker/rank/cuda_rank.h"
#include "worker/tools/forward_lib.h"

namespace tpserve {
namespace {

struct Flags {
  std::string model, token_ids, output, device = "cpu", dtype = "float32",
      quantization = "none";
  int64_t tp = 1;
  bool incremental = false;
  int64_t rank = -1, store_port = 0;  // set by the coordinator for its rank processes
  int64_t timeout_s = 60;
};

absl::Status Validate(const Flags& f, const std::vector<int32_t>& ids, int vocab) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat("--token-ids: id ", ids[i], " at index ", i,
                                                     " is outside the vocab [0, ", vocab, ")"));
    }
  }
  return absl::OkStatus();
}

ForwardMode Mode(const Flags& f) {
  return f.incremental ? ForwardMode::kIncremental : ForwardMode::kOneShot;
}

// A CUDA rank: NCCL through the coordinator's store, this rank's shards on GPU `rank`.
absl::Status RunCudaRank(const Flags& f, const std::vector<int32_t>& ids) {
  TPSERVE_ASSIGN_OR_RETURN(ModelFiles files, OpenModel(f.model, static_cast<int>(f.tp)));
  NcclOptions comm;
  comm.rank = static_cast<int>(f.rank);
  comm.size = static_cast<int>(f.tp);
  comm.device = static_cast<int>(f.rank);
  comm.store_port = static_cast<int>(f.store_port);
  comm.prefix = "forward/";
  comm.timeout = absl::Seconds(f.timeout_s);
  comm.connect_timeout = absl::Seconds(f.timeout_s);
  CudaModelOptions options;
  options.dtype = *ParseDeviceDType(f.dtype);  // checked in Main
  options.limits.set_max_batch_tokens(std::max<int>(static_cast<int>(ids.size()), 1));
  options.step_timeout = absl::Seconds(f.timeout_s);
  TPSERVE_ASSIGN_OR_RETURN(CudaRank rank, LoadCudaRank(files, comm, options));
  TPSERVE_ASSIGN_OR_RETURN(std::vector<Tensor> logits,
                           ForwardSequences(*rank.model, {ids}, Mode(f)));
  if (f.rank != 0) return absl::OkStatus();
  std::fprintf(stderr, "forward: decode steps replayed %d CUDA graph(s)\n",
               rank.model->num_decode_graphs());
  return WriteNpy(f.output, logits[0]);
}

// One rank: join the group, load this rank's shards, run, and (rank 0) write the output.
absl::Status RunRank(const Flags& f, const std::vector<int32_t>& ids) {
  if (f.device == "cuda") return RunCudaRank(f, ids);
  SetGemmThreads(1);
  SetBf16GemmThreads(1);
  GlooOptions options;
  options.rank = static_cast<int>(f.rank);
  options.size = static_cast<int>(f.tp);
  options.store_port = static_cast<int>(f.store_port);
  options.prefix = "forward";
  options.timeout = absl::Seconds(f.timeout_s);
  options.connect_timeout = absl::Seconds(f.timeout_s);
  TPSERVE_ASSIGN_OR_RETURN(std::unique_ptr<GlooCommGroup> comm, GlooCommGroup::Create(options));
  TPSERVE_ASSIGN_OR_RETURN(ModelFiles files, OpenModel(f.model, static_cast<int>(f.tp)));
  TPSERVE_ASSIGN_OR_RETURN(const CpuWeights weights, ParseCpuWeights(f.dtype, f.quantization));
  TPSERVE_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> model,
                           LoadModel(files, comm.get(), weights));
  TPSERVE_ASSIGN_OR_RETURN(std::vector<Tensor> logits, ForwardSequences(*model, {ids}, Mode(f)));
  if (f.rank == 0) return WriteNpy(f.output, logits[0]);
  return absl::OkStatus();
}

// The coordinator: validate everything a user can get wrong before starting ranks.
absl::Status Coordinate(const Flags& f, const std::vector<int32_t>& ids) {
  TPSERVE_ASSIGN_OR_RETURN(ModelFiles files, OpenModel(f.model, static_cast<int>(f.tp)));
  TPSERVE_RETURN_IF_ERROR(Validate(f, ids, files.config.vocab_size));
  TPSERVE_ASSIGN_OR_RETURN(std::string self, SelfExecutable());
  return RunLocalRanks(static_cast<int>(f.tp), [&](int rank, int store_port) {
    std::vector<std::string> args = {self,
                                     "--model",
                                     f.model,
                                     "--tp",
                                     std::to_string(f.tp),
                                     "--token-ids",
                                     f.token_ids,
                                     "--output",
                                     f.output,
                                     "--rank",
                                     std::to_string(rank),
                                     "--store-port",
                                     std::to_string(store_port),
                                     "--timeout-s",
                                     std::to_string(f.timeout_s),
                                     "--device",
                                     f.device,
                                     "--dtype",
                                     f.dtype,
                                     "--quantization",
                                     f.quantization};
    if (f.incremental) args.push_back("--incremental");
    return args;
  });
}

int Main(int argc, char** argv) {
  const std::string openblas_note = UseOpenBlasKernelsForThisCpu(argv);  // may re-execute
  if (!openblas_note.empty()) std::fprintf(stderr, "forward: %s\n", openblas_note.c_str());
  Flags f;
  ArgParser p("forward");
  p.AddString("model", &f.model, "Hugging Face model directory (config.json + safetensors)");
  p.AddInt("tp", &f.tp, "tensor-parallel ranks, one CPU process each (default 1)");
  p.AddString("token-ids", &f.token_ids, "comma-separated prompt token ids");
  p.AddString("output", &f.output, "where to write logits .npy [num_tokens, vocab_size]");
  p.AddBool("incremental", &f.incremental, "feed one token per step through the KV cache");
  p.AddString("device", &f.device, "cpu (default) or cuda (rank r on GPU r)");
  p.AddString("dtype", &f.dtype,
              "float32 (default) or bfloat16 (cpu: the layers' weights in bf16, fp32 compute)");
  p.AddString("quantization", &f.quantization,
              "none (default) or int8 (cpu: linears and LM head in int8 per output channel)");
  p.AddInt("timeout-s", &f.timeout_s, "bound on rendezvous and each collective (default 60)");
  p.AddInt("rank", &f.rank, "internal: run as this rank");
  p.AddInt("store-port", &f.store_port, "internal: the coordinator's rendezvous store port");
  absl::Status s = ParseFlagsOrExit(p, argc, argv);
  std::vector<int32_t> ids;
  if (s.ok() && (f.model.empty() || f.token_ids.empty() || f.output.empty())) {
    s = absl::InvalidArgumentError("--model, --token-ids and --output are required");
  }
  if (s.ok() && (f.tp < 1 || f.tp > 64)) s = absl::InvalidArgumentError("--tp must be in [1, 64]");
  if (s.ok() && f.device != "cpu" && f.device != "cuda") {
    s = absl::InvalidArgumentError(
        absl::StrCat("--device ", f.device, ": expected cpu or cuda"));
  }
  if (s.ok()) s = ParseDeviceDType(f.dtype).status();
  if (s.ok()) s = ParseCpuWeights(f.dtype, f.quantization).status();
  if (s.ok() && f.quantization == "int8" && f.device != "cpu") {
    s = absl::InvalidArgumentError("--quantization int8: only with --device cpu");
  }
  if (s.ok()) {
    s = ParseIdList(f.token_ids, &ids);
    if (!s.ok()) s = absl::InvalidArgumentError(absl::StrCat("--token-ids: ", s.message()));
  }
  if (!s.ok()) {
    std::fprintf(stderr, "forward: %s\n%s\n", std::string(s.message()).c_str(), p.HelpHint().c_str());
    return 2;
  }
  s = f.rank >= 0 ? RunRank(f, ids) : Coordinate(f, ids);
  if (!s.ok()) {
    std::fprintf(stderr, "forward%s: %s\n", f.rank >= 0 ? absl::StrCat(" rank ", f.rank).c_str() : "",
                 std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) { return tpserve::Main(argc, argv); }
