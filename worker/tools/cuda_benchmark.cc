// cuda_benchmark: the CUDA model core on one GPU beside the ceilings measured on the same
// GPU in the same run — HBM bandwidth (a device-to-device copy, bytes read + written)
// and bf16 GEMM throughput (cuBLAS, 8192³) — for decode at several batch sizes and for
// one long prefill.
//
//   cuda_benchmark --model DIR [--batches 1,8,64,256] [--context 512] [--steps 16]
//                  [--prefill 2048] [--dtype bfloat16] [--json OUT] [--copy-mb 2048]
//                  [--gemm-n 8192]
//
// Decode: each batch's sequences are first prefilled to --context tokens, then --steps
// decode steps are timed (median of wall time, host included), through CUDA graphs and
// again eagerly; the floor is the bytes a step must read (every weight but the embedding
// gather, plus the batch's KV cache) over the measured bandwidth. "host us" is the median
// host time a step spends validating, staging and enqueueing (one graph launch, or every
// kernel when eager) before it waits for the GPU.
// Prefill: one --prefill-token prompt (median of 3), against 2·params·tokens + causal
// attention FLOPs at the measured GEMM rate. Logits stay on the device (no sampling).
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "base/args.h"
#include "base/status_macros.h"
#include "rendezvous/store_server.h"
#include "worker/cuda/cuda_status.h"
#include "worker/cuda/device_buffer.h"
#include "worker/cuda/gemm.h"
#include "worker/dtype.h"
#include "worker/models/model_files.h"
#include "worker/rank/cuda_rank.h"

namespace tpserve {
namespace {

struct Flags {
  std::string model, batches = "1,8,64,256", dtype = "bfloat16", json;
  int64_t context = 512, steps = 16, prefill = 2048;
  int64_t copy_mb = 2048, gemm_n = 8192;  // the ceilings' sizes
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Milliseconds of `fn` (which enqueues on `stream`) by events, median of `reps` after 3
// warm-up runs.
template <typename Fn>
absl::StatusOr<double> TimeOnStream(cudaStream_t stream, int reps, Fn fn) {
  cudaEvent_t start, stop;
  TPSERVE_CUDA_RETURN_IF_ERROR(cudaEventCreate(&start));
  TPSERVE_CUDA_RETURN_IF_ERROR(cudaEventCreate(&stop));
  std::vector<double> ms;
  for (int i = 0; i < reps + 3; ++i) {
    TPSERVE_CUDA_RETURN_IF_ERROR(cudaEventRecord(start, stream));
    TPSERVE_RETURN_IF_ERROR(fn());
    TPSERVE_CUDA_RETURN_IF_ERROR(cudaEventRecord(stop, stream));
    TPSERVE_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop));
    float t = 0;
    TPSERVE_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&t, start, stop));
    if (i >= 3) ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return Median(ms);
}

// Random bf16 bits in about [-1, 1), never zeros (zeros run faster than real data).
absl::StatusOr<DeviceBuffer> RandomBf16(int64_t count, uint64_t seed) {
  std::vector<uint16_t> bits(count);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < count; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    bits[i] = FloatToBf16(static_cast<float>(int64_t(x >> 40) - (1 << 23)) / float(1 << 23));
  }
  TPSERVE_ASSIGN_OR_RETURN(DeviceBuffer buf, DeviceBuffer::Create(count * 2));
  TPSERVE_RETURN_IF_ERROR(buf.CopyFromHost(bits.data(), count * 2));
  return buf;
}

struct Ceilings {
  double hbm_gbps = 0, gemm_tflops = 0;
};

absl::StatusOr<Ceilings> MeasureCeilings(cudaStream_t stream, const Flags& f) {
  Ceilings c;
  const size_t bytes = static_cast<size_t>(f.copy_mb) << 20;
  TPSERVE_ASSIGN_OR_RETURN(DeviceBuffer a, DeviceBuffer::Create(bytes));
  TPSERVE_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Create(bytes));
  TPSERVE_RETURN_IF_ERROR(a.Fill(0x5A));
  TPSERVE_ASSIGN_OR_RETURN(const double copy_ms, TimeOnStream(stream, 10, [&] {
    return CudaStatus(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, stream),
                      "copy");
  }));
  c.hbm_gbps = 2.0 * bytes / (copy_ms * 1e-3) / 1e9;
  const int64_t n = f.gemm_n;
  TPSERVE_ASSIGN_OR_RETURN(std::unique_ptr<CudaGemm> gemm, CudaGemm::Create(stream));
  TPSERVE_ASSIGN_OR_RETURN(DeviceBuffer x, RandomBf16(n * n, 1));
  TPSERVE_ASSIGN_OR_RETURN(DeviceBuffer w, RandomBf16(n * n, 2));
  TPSERVE_ASSIGN_OR_RETURN(DeviceBuffer y, DeviceBuffer::Create(n * n * 2));
  TPSERVE_ASSIGN_OR_RETURN(const double gemm_ms, TimeOnStream(stream, 10, [&] {
    return gemm->MatMulTransB(x.as<__nv_bfloat16>(), w.as<__nv_bfloat16>(), n, n, n,
                              y.as<__nv_bfloat16>());
  }));
  c.gemm_tflops = 2.0 * n * n * n / (gemm_ms * 1e-3) / 1e12;
  return c;
}

struct ModelCounts {
  int64_t params = 0, embedding = 0;
  int64_t decode_weights = 0;  // parameters a decode step reads: all but the embedding
                               // gather (whose table a tied head does read)
  int64_t token_weights = 0;   // parameters every prompt token multiplies (no head)
  int64_t kv_bytes_per_token = 0;  // all layers, keys and values
  int64_t attention_dim = 0;       // n_heads · head_dim
};

ModelCounts Count(const ModelConfig& c, int bytes_per_element) {
  ModelCounts m;
  const int64_t h = c.hidden_size, d = c.head_dim, q = int64_t{c.num_attention_heads} * d;
  const int64_t kv = int64_t{c.num_key_value_heads} * d, i = c.intermediate_size;
  m.embedding = int64_t{c.vocab_size} * h;
  const int64_t layer = h * (q + 2 * kv) + q * h + 3 * h * i + 2 * h;
  m.params = m.embedding * (c.tie_word_embeddings ? 1 : 2) + c.num_hidden_layers * layer + h;
  m.decode_weights = c.tie_word_embeddings ? m.params : m.params - m.embedding;
  m.token_weights = int64_t{c.num_hidden_layers} * layer;
  m.kv_bytes_per_token = int64_t{c.num_hidden_layers} * 2 * kv * bytes_per_element;
  m.attention_dim = q;
  return m;
}

// Prefills sequences [first, first + count) of `tables` to `len` tokens, packing at most
// `max_tokens` tokens per step.
absl::Status Prefill(CudaModelRunner& model, const std::vector<std::vector<int32_t>>& tables,
                     int first, int count, int len, int max_tokens, int vocab) {
  std::vector<int> done(count, 0);
  for (int s = 0; s < count;) {
    StepBatch batch;
    int budget = max_tokens;
    for (int k = s; k < count && budget > 0; ++k) {
      const int take = std::min(len - done[k], budget);
      if (take == 0) continue;
      for (int t = 0; t < take; ++t) batch.token_ids.push_back((done[k] + t + 7 * k) * 7919 % vocab);
      done[k] += take;
      budget -= take;
      batch.seqs.push_back({take, done[k], tables[first + k], false});
    }
    TPSERVE_RETURN_IF_ERROR(model.ForwardToDevice(batch).status());
    while (s < count && done[s] == len) ++s;
  }
  return absl::OkStatus();
}

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

struct DecodeTime {
  double ms = 0;       // median wall time of a step
  double host_us = 0;  // median host time of its enqueue (last_enqueue_time)
};

// Decode steps of sequences [0, b), each at f.context tokens (already prefilled), over
// f.steps steps after 2 warm-up ones (which capture the graph when graphs are on).
absl::StatusOr<DecodeTime> TimeDecode(CudaModelRunner& model,
                                      const std::vector<std::vector<int32_t>>& tables, int b,
                                      const Flags& f, const ModelConfig& config) {
  std::vector<double> ms, host_us;
  for (int step = 0; step < f.steps + 2; ++step) {
    StepBatch batch;
    for (int s = 0; s < b; ++s) {
      batch.token_ids.push_back((step * 31 + s) % config.vocab_size);
      batch.seqs.push_back({1, static_cast<int32_t>(f.context + step + 1), tables[s], false});
    }
    auto start = std::chrono::steady_clock::now();
    TPSERVE_RETURN_IF_ERROR(model.ForwardToDevice(batch).status());
    if (step < 2) continue;
    ms.push_back(Seconds(start) * 1e3);
    host_us.push_back(absl::ToDoubleMicroseconds(model.last_enqueue_time()));
  }
  return DecodeTime{Median(ms), Median(host_us)};
}

absl::Status Run(const Flags& f) {
  std::vector<int32_t> batches;
  TPSERVE_RETURN_IF_ERROR(ParseIdList(f.batches, &batches));
  const int max_batch = *std::max_element(batches.begin(), batches.end());
  TPSERVE_ASSIGN_OR_RETURN(const DeviceDType dtype, ParseDeviceDType(f.dtype));
  TPSERVE_ASSIGN_OR_RETURN(ModelFiles files, OpenModel(f.model, 1));
  TPSERVE_ASSIGN_OR_RETURN(std::unique_ptr<StoreServer> store, StoreServer::Start());
  NcclOptions comm;
  comm.store_port = store->port();
  comm.prefix = "bench/";
  CudaModelOptions options;
  options.dtype = dtype;
  options.limits.set_max_batch_tokens(static_cast<int>(std::max<int64_t>(f.prefill, 8192)));
  options.limits.set_max_sequences(std::max(max_batch, 1));
  options.max_logit_rows = std::max(max_batch, 1);
  auto load_start = std::chrono::steady_clock::now();
  TPSERVE_ASSIGN_OR_RETURN(CudaRank rank, LoadCudaRank(files, comm, options));
  const double load_s = Seconds(load_start);
  const ModelConfig& config = rank.model->config();
  TPSERVE_ASSIGN_OR_RETURN(const Ceilings ceil, MeasureCeilings(rank.comm->stream(), f));

  // Decode reaches context + steps + 2 tokens (2 warm-up steps); sequence 0 also holds
  // the prefill prompt.
  const int block = 16;
  const int decode_blocks = static_cast<int>((f.context + f.steps + 2 + block - 1) / block);
  const int first_blocks = std::max<int>(decode_blocks, static_cast<int>((f.prefill + block - 1) / block));
  std::vector<std::vector<int32_t>> tables(max_batch);
  int next_block = 0;
  for (int s = 0; s < max_batch; ++s) {
    for (int b = 0; b < (s == 0 ? first_blocks : decode_blocks); ++b) tables[s].push_back(next_block++);
  }
  TPSERVE_RETURN_IF_ERROR(rank.model->AllocateCache(next_block, block));
  const ModelCounts counts = Count(config, dtype == DeviceDType::kFloat32 ? 4 : 2);
  const int e = dtype == DeviceDType::kFloat32 ? 4 : 2;
  std::string json = absl::StrFormat(
      "{\"gpu_hbm_gbps\": %.6g, \"gpu_gemm_tflops\": %.6g, \"params\": %d, \"load_s\": %.3f, "
      "\"decode\": [",
      ceil.hbm_gbps, ceil.gemm_tflops, counts.params, load_s);
  std::printf("model %s: %.2fB parameters, %s, loaded in %.1f s\n", f.model.c_str(),
              counts.params / 1e9, f.dtype.c_str(), load_s);
  std::printf("measured ceilings: HBM %.0f GB/s (copy, read+write), bf16 GEMM %.0f TFLOP/s\n",
              ceil.hbm_gbps, ceil.gemm_tflops);
  std::printf("%-8s %-8s %10s %10s %10s %10s %10s %10s %10s\n", "batch", "context", "ms/step",
              "eager ms", "floor ms", "% of HBM", "tok/s", "host us", "eager us");
  for (size_t i = 0; i < batches.size(); ++i) {
    const int b = batches[i];
    TPSERVE_RETURN_IF_ERROR(Prefill(*rank.model, tables, 0, b, static_cast<int>(f.context),
                                    options.limits.max_batch_tokens(), config.vocab_size));
    TPSERVE_ASSIGN_OR_RETURN(const DecodeTime graphed, TimeDecode(*rank.model, tables, b, f, config));
    if (rank.model->num_decode_graphs() == 0) {
      return absl::InternalError(absl::StrCat(
          "decode at batch ", b, " ran without CUDA graphs (see stderr): the graph column "
          "would measure eager steps"));
    }
    rank.model->SetCudaGraphs(false);
    TPSERVE_ASSIGN_OR_RETURN(const DecodeTime eager, TimeDecode(*rank.model, tables, b, f, config));
    rank.model->SetCudaGraphs(true);
    const double ctx = f.context + f.steps / 2.0;
    const double bytes = double(counts.decode_weights) * e +
                         double(b) * ctx * counts.kv_bytes_per_token;
    const double floor_ms = bytes / (ceil.hbm_gbps * 1e9) * 1e3;
    const double step_ms = graphed.ms;
    std::printf("%-8d %-8d %10.2f %10.2f %10.2f %9.1f%% %10.0f %10.1f %10.1f\n", b,
                int(f.context), step_ms, eager.ms, floor_ms, 100 * floor_ms / step_ms,
                b / (step_ms * 1e-3), graphed.host_us, eager.host_us);
    json += absl::StrFormat(
        "%s{\"batch\": %d, \"context\": %d, \"ms_per_step\": %.6g, "
        "\"eager_ms_per_step\": %.6g, \"floor_ms\": %.6g, \"host_us_per_step\": %.6g, "
        "\"eager_host_us_per_step\": %.6g}",
        i == 0 ? "" : ", ", b, int(f.context), step_ms, eager.ms, floor_ms, graphed.host_us,
        eager.host_us);
  }
  // Prefill: one prompt of f.prefill tokens from position 0 (its blocks are sequence 0's).
  std::vector<double> prefill_s;
  for (int rep = 0; rep < 4; ++rep) {
    auto start = std::chrono::steady_clock::now();
    TPSERVE_RETURN_IF_ERROR(Prefill(*rank.model, tables, 0, 1, static_cast<int>(f.prefill),
                                    options.limits.max_batch_tokens(), config.vocab_size));
    if (rep > 0) prefill_s.push_back(Seconds(start));
  }
  const double t = Median(prefill_s), n = double(f.prefill);
  // Every token through the layers, the last one through the head, and causal
  // attention (QKᵀ and PV over n²/2 pairs each).
  const double flops = 2.0 * double(counts.token_weights) * n + 2.0 * double(counts.embedding) +
                       2.0 * config.num_hidden_layers * counts.attention_dim * n * n;
  std::printf("prefill %d tokens: %.1f ms, %.0f tok/s, %.0f TFLOP/s = %.1f%% of measured GEMM\n",
              int(f.prefill), t * 1e3, n / t, flops / t / 1e12,
              100 * flops / t / 1e12 / ceil.gemm_tflops);
  json += absl::StrFormat("], \"prefill\": {\"tokens\": %d, \"ms\": %.6g, \"tflops\": %.6g}}\n",
                          int(f.prefill), t * 1e3, flops / t / 1e12);
  if (!f.json.empty()) {
    std::ofstream out(f.json);
    out << json;
    if (!out) return absl::DataLossError(absl::StrCat(f.json, ": write failed"));
  }
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  Flags f;
  ArgParser p("cuda_benchmark");
  p.AddString("model", &f.model, "Hugging Face model directory (required)");
  p.AddString("batches", &f.batches, "decode batch sizes (default 1,8,64,256)");
  p.AddInt("context", &f.context, "tokens in each sequence before the timed decode (default 512)");
  p.AddInt("steps", &f.steps, "timed decode steps per batch size (default 16)");
  p.AddInt("prefill", &f.prefill, "prompt length of the prefill measurement (default 2048)");
  p.AddString("dtype", &f.dtype, "bfloat16 (default) or float32");
  p.AddString("json", &f.json, "also write the results here as JSON");
  p.AddInt("copy-mb", &f.copy_mb, "MiB of the bandwidth ceiling's copy (default 2048)");
  p.AddInt("gemm-n", &f.gemm_n, "n of the GEMM ceiling's n×n×n bf16 product (default 8192)");
  absl::Status s = ParseFlagsOrExit(p, argc, argv);
  if (s.ok() && f.model.empty()) s = absl::InvalidArgumentError("--model is required");
  if (s.ok() && (f.context < 1 || f.steps < 1 || f.prefill < 1 || f.copy_mb < 1 ||
                  f.gemm_n < 16 || f.gemm_n % 16 != 0)) {
    s = absl::InvalidArgumentError(
        "--context, --steps, --prefill and --copy-mb must be ≥ 1, --gemm-n a multiple of 16");
  }
  if (!s.ok()) {
    std::fprintf(stderr, "cuda_benchmark: %s\n%s\n", std::string(s.message()).c_str(),
                 p.HelpHint().c_str());
    return 2;
  }
  if (s = Run(f); !s.ok()) {
    std::fprintf(stderr, "cuda_benchmark: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) { return tpserve::Main(argc, argv); }
