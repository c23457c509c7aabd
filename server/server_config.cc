#include "server/server_config.h"

#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/args.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "base/version.h"
#include "server/chat/reasoning_parser.h"
#include "server/chat/tool_call_parser.h"

namespace tpserve {
namespace {

absl::Status CheckRange(const char* flag, int64_t value, int64_t low, int64_t high) {
  if (value < low || value > high) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " must be in [", low, ", ", high, "], got ", value));
  }
  return absl::OkStatus();
}

// Integer flags, parsed as int64 and range-checked into the int fields by Validate.
struct IntFlags {
  int64_t tp, port, metrics_port, http_port, kv_blocks, kv_memory_mb, kv_block_size, max_context,
      max_batch_tokens, max_sequences, max_queue, step_timeout_ms, step_timeout_per_token_ms,
      step_time_target_ms, start_timeout_s, warmup_tokens, cpu_threads_per_rank, drain_grace_ms,
      log_stats_interval_s;
};

void Register(ArgParser& args, ServerConfig& c, IntFlags& i, std::vector<std::string>* model,
              bool* disable_log_stats) {
  args.SetEnvPrefix("TPSERVE_");
  args.AddPositional("model-path", model, 1, "the model, as --model gives it (vLLM's `serve MODEL`)");
  args.AddString("model", &c.model_dir,
                 "Hugging Face model directory, or a hub id (org/name[@revision]) already in "
                 "the local hub cache (required, here or as the one positional argument)");
  args.AddString("model-name,served-model-name", &c.model_name,
                 "name reported by GetModelInfo and /v1/models (default: the hub id, or the "
                 "directory's name)");
  args.AddInt("tp,tensor-parallel-size", &i.tp, "tensor-parallel size: worker ranks");
  args.AddString("device", &c.device, "cpu or cuda");
  args.AddString("dtype", &c.dtype,
                 "auto (default: on cpu the checkpoint's dtype, bf16/fp16 served as bfloat16; "
                 "on cuda bfloat16), float32 or bfloat16 (on cpu: the weights in bf16, "
                 "activations and accumulation in fp32)");
  args.AddString("kv-cache-dtype", &c.kv_cache_dtype,
                 "auto (default: as --dtype serves, so bf16 in bf16 mode), float32 or bfloat16 "
                 "(cpu: half the KV memory and bandwidth of float32)");
  args.AddString("quantization", &c.quantization,
                 "none (default) or int8 (cpu: weight-only int8 with a scale per output "
                 "channel, computed at load from a bf16, fp16 or fp32 checkpoint; half the "
                 "weight bytes of bfloat16; with --dtype auto or bfloat16)");
  args.AddDouble("gpu-memory-fraction,gpu-memory-utilization", &c.gpu_memory_fraction,
                 "cuda: share of each GPU for weights, activations and KV cache (default 0.9)");
  args.AddString("host", &c.host,
                 "address to serve on (default 0.0.0.0: every interface; 127.0.0.1: this host "
                 "only)");
  args.AddInt("port", &i.port, "gRPC port to serve on (0 picks a free one)");
  args.AddInt("metrics-port", &i.metrics_port,
              "serve Prometheus metrics at http://HOST:PORT/metrics (0 picks a free port; "
              "default: off)");
  args.AddInt("http-port", &i.http_port,
              "serve the OpenAI-compatible HTTP API (/v1/chat/completions, /v1/completions, "
              "/v1/models, /health, /metrics, /tokenize, /detokenize) on this port (0 picks "
              "a free one; default: off)");
  args.AddString("http-host", &c.http_host, "address of --http-port (default: --host)");
  args.AddString("chat-template", &c.chat_template_file,
                 "Jinja chat template file for chat requests (default: the model's "
                 "chat_template.jinja or tokenizer_config.json chat_template)");
  args.AddString("tool-call-parser", &c.tool_call_parser,
                 "parse tool calls out of chat answers in this format (hermes, llama3_json, "
                 "llama4_json; default: none, and tool requests are refused)");
  args.AddString("reasoning-parser", &c.reasoning_parser,
                 "split <think> reasoning out of chat answers into reasoning_content "
                 "(qwen3, deepseek_r1; default: none)");
  args.AddBool("external-workers", &c.external_workers, "wait for --tp workers to attach");
  args.AddBool("exit-on-pool-failure", &c.exit_on_pool_failure,
               "exit non-zero when the worker pool fails instead of rebuilding it");
  args.AddBool("enforce-eager", &c.enforce_eager,
               "cuda: run decode steps eagerly instead of replaying CUDA graphs");
  args.AddBool("no-prefix-caching,no-enable-prefix-caching", &c.no_prefix_caching,
               "compute every prompt in full instead of sharing cached KV blocks of common "
               "prefixes");
  args.AddBool("no-staggered-admission", &c.no_staggered_admission,
               "admit a burst of prompts in as few steps as --max-batch-tokens allows instead "
               "of in groups sized from measured step times for the lowest mean time to "
               "first token");
  args.AddBool("allow-reset-prefix-cache", &c.allow_reset_prefix_cache,
               "serve the ResetPrefixCache RPC and POST /reset_prefix_cache (benchmarks; any "
               "client may then empty the cache)");
  args.AddString("worker-binary", &c.worker_binary,
                 "the rank binary to spawn (default: tpserve_worker, or tpserve_worker_cuda "
                 "for --device cuda, beside tpserve or in bazel-bin's worker/rank/)");
  args.AddString("worker-token-file", &c.worker_token_file,
                 "external workers: file holding the token they must prove (32+ bytes; "
                 "give workers the same file)");
  args.AddString("control-address", &c.control_address,
                 "where workers dial in: unix:PATH or HOST:PORT");
  args.AddString("advertise-address", &c.advertise_address,
                 "external workers: the host they reach the rendezvous store at, when not "
                 "the --control-address host (a frontend behind NAT, or known by a DNS name; "
                 "default: that host, or for 0.0.0.0 the one each worker dialled)");
  args.AddInt("kv-blocks", &i.kv_blocks, "KV cache blocks per rank");
  args.AddInt("kv-memory-mb", &i.kv_memory_mb, "KV cache memory per rank, MiB");
  args.AddInt("kv-block-size", &i.kv_block_size, "tokens per KV block");
  args.AddInt("max-context,max-model-len", &i.max_context,
              "tokens per request, prompt and output (0: the model's max_position_embeddings)");
  args.AddInt("max-batch-tokens,max-num-batched-tokens", &i.max_batch_tokens,
              "tokens per engine step");
  args.AddInt("max-sequences,max-num-seqs", &i.max_sequences, "sequences per engine step");
  args.AddInt("max-queue", &i.max_queue, "waiting requests before RESOURCE_EXHAUSTED");
  args.AddInt("step-timeout-ms", &i.step_timeout_ms, "deadline of one step on every rank");
  args.AddInt("step-time-target-ms", &i.step_time_target_ms,
              "size each engine step's tokens from measured step times to take about this "
              "long, so decodes keep their pace while long prompts prefill in chunks "
              "(e.g. 1000 on a CPU host; default 0: off, --max-batch-tokens a step)");
  args.AddInt("step-timeout-per-token-ms", &i.step_timeout_per_token_ms,
              "added to a step's deadline for each token it computes (default 100), so a "
              "long prefill on a slow machine is not taken for a hung rank");
  args.AddInt("start-timeout-s", &i.start_timeout_s,
              "deadline for the pool to be ready, and again for its warm-up");
  args.AddInt("cpu-threads-per-rank", &i.cpu_threads_per_rank,
              "--device cpu: compute threads of each rank tpserve starts (default 0: the CPUs "
              "tpserve may run on, shared evenly between the --tp ranks; external workers "
              "take their own --threads)");
  args.AddInt("warmup-tokens", &i.warmup_tokens,
              "before serving, each pool generation prefills two prompts of this many tokens "
              "and decodes two steps, so the first requests find warm ranks and a measured "
              "step cost (default 64; 0: serve cold)");
  args.AddInt("drain-grace-ms", &i.drain_grace_ms, "time in-flight requests get on SIGTERM");
  args.AddString("tls-cert-file", &c.tls_cert_file,
                 "serve TLS with this PEM certificate chain (with --tls-key-file; default: "
                 "plaintext)");
  args.AddString("tls-key-file", &c.tls_key_file, "the PEM private key of --tls-cert-file");
  args.AddString("tls-client-ca-file", &c.tls_client_ca_file,
                 "mutual TLS: require client certificates signed by these PEM CA certificates");
  args.AddString("api-key-file", &c.api_key_file,
                 "require \"authorization: Bearer KEY\" on tpserve.v1.Inference calls, KEY one "
                 "of this file's lines (blank lines and # comments ignored); health and "
                 "reflection stay open");
  args.AddString("log-level", &c.log_level,
                 "least severe log lines written, by the server and its workers: debug, info, "
                 "warning or error (info and debug on stdout, the rest on stderr)");
  args.AddInt("log-stats-interval-s", &i.log_stats_interval_s,
              "log throughput, running and waiting requests and KV-cache use this often, "
              "seconds (0: never; an idle server logs once)");
  args.AddBool("disable-log-stats", disable_log_stats, "no stats lines (as 0 above)");
  args.AddBool("disable-log-requests", &c.disable_log_requests,
               "no line per finished request (id, tokens, queue time, TTFT, duration, status)");
}

IntFlags Defaults(const ServerConfig& c) {
  return {c.tp,
          c.port,
          c.metrics_port,
          c.http_port,
          c.kv_blocks,
          c.kv_memory_mb,
          c.kv_block_size,
          c.limits.max_context(),
          c.limits.max_batch_tokens(),
          c.limits.max_sequences(),
          c.max_queue,
          c.step_timeout_ms,
          c.step_timeout_per_token_ms,
          c.step_time_target_ms,
          c.start_timeout_s,
          c.warmup_tokens,
          c.cpu_threads_per_rank,
          c.drain_grace_ms,
          c.log_stats_interval_s};
}

absl::Status Narrow(const IntFlags& i, ServerConfig& c) {
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  const std::vector<std::pair<const char*, std::pair<int64_t, int*>>> fields = {
      {"tp", {i.tp, &c.tp}},
      {"port", {i.port, &c.port}},
      {"metrics-port", {i.metrics_port, &c.metrics_port}},
      {"http-port", {i.http_port, &c.http_port}},
      {"kv-blocks", {i.kv_blocks, &c.kv_blocks}},
      {"kv-block-size", {i.kv_block_size, &c.kv_block_size}},
      {"max-queue", {i.max_queue, &c.max_queue}},
      {"step-timeout-ms", {i.step_timeout_ms, &c.step_timeout_ms}},
      {"step-timeout-per-token-ms", {i.step_timeout_per_token_ms, &c.step_timeout_per_token_ms}},
      {"step-time-target-ms", {i.step_time_target_ms, &c.step_time_target_ms}},
      {"start-timeout-s", {i.start_timeout_s, &c.start_timeout_s}},
      {"warmup-tokens", {i.warmup_tokens, &c.warmup_tokens}},
      {"cpu-threads-per-rank", {i.cpu_threads_per_rank, &c.cpu_threads_per_rank}},
      {"drain-grace-ms", {i.drain_grace_ms, &c.drain_grace_ms}},
      {"log-stats-interval-s", {i.log_stats_interval_s, &c.log_stats_interval_s}},
  };
  for (const auto& [flag, value] : fields) {
    TPSERVE_RETURN_IF_ERROR(CheckRange(flag, value.first, -kMax, kMax));
    *value.second = static_cast<int>(value.first);
  }
  const std::pair<const char*, int64_t> limits[] = {{"max-context", i.max_context},
                                                    {"max-batch-tokens", i.max_batch_tokens},
                                                    {"max-sequences", i.max_sequences}};
  for (const auto& [flag, value] : limits) {
    TPSERVE_RETURN_IF_ERROR(CheckRange(flag, value, -kMax, kMax));
  }
  c.limits = MakeBatchLimits(static_cast<int>(i.max_context), static_cast<int>(i.max_batch_tokens),
                             static_cast<int>(i.max_sequences));
  c.kv_memory_mb = i.kv_memory_mb;
  return absl::OkStatus();
}

}  // namespace

absl::Status ServerConfig::Validate() const {
  if (model_dir.empty()) return absl::InvalidArgumentError("--model is required");
  if (device != "cpu" && device != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("--device must be cpu or cuda, got \"", device, "\""));
  }
  if (dtype != "auto" && dtype != "float32" && dtype != "bfloat16") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--dtype \"", dtype, "\": expected auto, float32 or bfloat16 (float16 weights are "
        "served as bfloat16)"));
  }
  if (kv_cache_dtype != "auto" && kv_cache_dtype != "float32" && kv_cache_dtype != "bfloat16") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kv-cache-dtype \"", kv_cache_dtype, "\": expected auto, float32 or bfloat16"));
  }
  if (kv_cache_dtype != "auto" && device == "cuda" && dtype != "auto" && kv_cache_dtype != dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kv-cache-dtype ", kv_cache_dtype, ": the cuda KV cache holds --dtype (", dtype, ")"));
  }
  if (quantization != "none" && quantization != "int8") {
    return absl::InvalidArgumentError(
        absl::StrCat("--quantization \"", quantization, "\": expected none or int8"));
  }
  if (quantization == "int8" && device != "cpu") {
    return absl::InvalidArgumentError(
        "--quantization int8 is served by the cpu backend only (--device cuda holds bf16 or "
        "fp32 weights)");
  }
  if (quantization == "int8" && dtype == "float32") {
    return absl::InvalidArgumentError(
        "--quantization int8 keeps the embedding table in bf16: --dtype must be auto or "
        "bfloat16, not float32");
  }
  if (!(gpu_memory_fraction > 0 && gpu_memory_fraction <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--gpu-memory-fraction must be in (0, 1], got ", gpu_memory_fraction));
  }
  if (cpu_threads_per_rank != 0 && device != "cpu") {
    return absl::InvalidArgumentError("--cpu-threads-per-rank applies to --device cpu only");
  }
  if (cpu_threads_per_rank != 0 && external_workers) {
    return absl::InvalidArgumentError(
        "--cpu-threads-per-rank applies to the ranks tpserve starts; external workers take "
        "their own --threads");
  }
  if (enforce_eager && device != "cuda") {
    return absl::InvalidArgumentError("--enforce-eager applies to --device cuda only");
  }
  if (tls_cert_file.empty() != tls_key_file.empty()) {
    return absl::InvalidArgumentError("give --tls-cert-file and --tls-key-file together");
  }
  if (!tls_client_ca_file.empty() && tls_cert_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls-client-ca-file needs --tls-cert-file and --tls-key-file (mutual TLS is TLS)");
  }
  if (absl::Status s = tool_call_parser.empty() ? absl::OkStatus()
                                                 : ValidToolParserName(tool_call_parser);
      !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--tool-call-parser: ", s.message()));
  }
  if (absl::Status s = reasoning_parser.empty() ? absl::OkStatus()
                                                : ValidReasoningParserName(reasoning_parser);
      !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--reasoning-parser: ", s.message()));
  }
  TPSERVE_RETURN_IF_ERROR(ValidateLogLevel(log_level));
  if (kv_blocks > 0 && kv_memory_mb > 0) {
    return absl::InvalidArgumentError("give --kv-blocks or --kv-memory-mb, not both");
  }
  const struct {
    const char* flag;
    int64_t value, low, high;
  } ranges[] = {
      {"tp", tp, 1, 1024},
      {"port", port, 0, 65535},
      {"metrics-port", metrics_port, -1, 65535},
      {"http-port", http_port, -1, 65535},
      {"kv-blocks", kv_blocks, 0, 1 << 30},
      {"kv-memory-mb", kv_memory_mb, 0, int64_t{1} << 30},
      {"kv-block-size", kv_block_size, 1, 1024},
      {"max-context", limits.max_context(), 0, kMaxMaxContext},
      {"max-batch-tokens", limits.max_batch_tokens(), 1, kMaxMaxBatchTokens},
      {"max-sequences", limits.max_sequences(), 1, kMaxMaxSequences},
      {"max-queue", max_queue, 1, 1 << 24},
      {"step-timeout-ms", step_timeout_ms, 1, 3600000},
      {"step-timeout-per-token-ms", step_timeout_per_token_ms, 0, 60000},
      {"step-time-target-ms", step_time_target_ms, 0, 3600000},
      {"start-timeout-s", start_timeout_s, 1, 86400},
      {"warmup-tokens", warmup_tokens, 0, 65536},
      {"cpu-threads-per-rank", cpu_threads_per_rank, 0, 1024},
      {"drain-grace-ms", drain_grace_ms, 0, 3600000},
      {"log-stats-interval-s", log_stats_interval_s, 0, 86400},
  };
  for (const auto& r : ranges) {
    TPSERVE_RETURN_IF_ERROR(CheckRange(r.flag, r.value, r.low, r.high));
  }
  return absl::OkStatus();
}

std::string ServerConfig::ComputeDType(DType checkpoint_dtype) const {
  if (dtype != "auto") return dtype;
  if (device != "cpu" || quantization == "int8") return "bfloat16";
  return checkpoint_dtype == DType::kF32 ? "float32" : "bfloat16";
}

absl::StatusOr<std::optional<ServerConfig>> ParseServerFlags(int argc, char** argv) {
  ServerConfig config;
  IntFlags ints = Defaults(config);
  std::vector<std::string> model;
  bool disable_log_stats = false;
  ArgParser args("tpserve",
                 "tpserve: serves a Hugging Face model over gRPC (tpserve.v1.Inference, "
                 "health, reflection) and, with --http-port, the OpenAI-compatible HTTP API. "
                 "Every flag can also come from its TPSERVE_* environment variable.");
  args.SetVersion(VersionText("tpserve"));
  Register(args, config, ints, &model, &disable_log_stats);
  absl::StatusOr<ArgParser::Action> action = args.Parse(argc, argv);
  absl::Status status = action.status();
  if (status.ok() && *action == ArgParser::Action::kExit) return std::nullopt;
  if (status.ok() && !model.empty()) {
    if (args.Seen("model")) {
      status = absl::InvalidArgumentError(absl::StrCat(
          "the model is given twice: --model ", config.model_dir, " and \"", model[0], "\""));
    }
    config.model_dir = model[0];
  }
  if (status.ok()) status = Narrow(ints, config);
  if (disable_log_stats) config.log_stats_interval_s = 0;
  if (status.ok()) status = config.Validate();
  if (!status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(status.message(), "\n", args.HelpHint()));
  }
  return config;
}

}  // namespace tpserve
