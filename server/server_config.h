// ServerConfig: everything the tpserve binary is configured with, read once from its
// flags in main() and validated before anything starts.
#ifndef TPSERVE_SERVER_SERVER_CONFIG_H_
#define TPSERVE_SERVER_SERVER_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tpserve/v1/batch_limits.h"
#include "worker/loader/hf_config.h"  // DType

namespace tpserve {

struct ServerConfig {
  // --model: a Hugging Face directory (config.json, weights), or a hub id that main
  // turns into its cache snapshot's directory (server/model_path.h) before serving.
  std::string model_dir;
  std::string model_name;             // empty: the directory's base name
  int tp = 1;
  std::string device = "cpu";         // "cpu" or "cuda"
  // "auto" (the default): on cpu the checkpoint's dtype (bf16 and fp16 checkpoints as
  // bfloat16, fp32 as float32); on cuda bfloat16. Or "float32", "bfloat16".
  std::string dtype = "auto";
  // "auto" (the default): the served dtype's (bf16 in bf16 mode); "float32" or
  // "bfloat16" (cpu; cuda's cache always holds the compute dtype).
  std::string kv_cache_dtype = "auto";
  // "none" (the default) or "int8" (cpu only): every linear weight and the LM head
  // quantized at load to int8 with one fp32 scale per output channel, from whatever the
  // checkpoint holds; the embedding table stays bf16, so the served dtype is bfloat16.
  std::string quantization = "none";
  // cuda, without --kv-blocks/--kv-memory-mb: each rank's weights, activations and KV
  // cache take up to this fraction of its GPU's memory.
  double gpu_memory_fraction = 0.9;
  std::string host = "0.0.0.0";       // every interface, as a container needs
  int port = 50051;                   // gRPC; 0 picks a free port
  int metrics_port = -1;              // Prometheus /metrics over HTTP on host; -1: none
  // The OpenAI-compatible HTTP API (server/openai/): -1 off; on http_host ("" = host).
  int http_port = -1;
  std::string http_host;
  // Chat: the template (empty: the model's own, server/chat/chat_template.h) and how
  // answers are split into tool calls and reasoning (empty: not at all).
  std::string chat_template_file;
  std::string tool_call_parser;
  std::string reasoning_parser;
  bool external_workers = false;      // wait for tp workers to attach instead of spawning
  bool exit_on_pool_failure = false;  // exit non-zero instead of rebuilding the pool
  bool enforce_eager = false;         // cuda: decode steps without CUDA graphs
  bool no_prefix_caching = false;     // compute every prompt in full
  bool no_staggered_admission = false;  // a burst's prompts in as few steps as fit
  bool allow_reset_prefix_cache = false;  // serve ResetPrefixCache (benchmarks)
  std::string worker_binary;          // empty: DefaultWorkerBinary(device)
  std::string control_address;        // empty: a Unix socket in a fresh temporary folder
  std::string advertise_address;      // the store's host in Assignments; empty: derived
  // --external-workers: the secret the attaching workers prove (they read the same file
  // with their --worker-token-file); spawned workers get a fresh one per pool.
  std::string worker_token_file;
  int kv_blocks = 0;                  // exactly this many KV blocks per rank, or
  int64_t kv_memory_mb = 0;           // this much KV memory per rank (0: the pool's default)
  int kv_block_size = 16;
  // --max-context (0: the model's max_position_embeddings), --max-batch-tokens,
  // --max-sequences.
  BatchLimits limits = DefaultBatchLimits();
  int max_queue = 256;
  int step_timeout_ms = 30000;
  int step_timeout_per_token_ms = 100;  // added to a step's deadline per token it computes
  // Size steps to take about this long (prefill chunks shrink on a slow host, so decodes
  // keep their pace while long prompts are prefilled); 0: off, max_batch_tokens a step.
  int step_time_target_ms = 0;
  int start_timeout_s = 300;
  // Each pool generation runs two prompts of this many tokens before it serves (the
  // ranks' first-step costs paid, the step cost model started); 0: it serves cold.
  int warmup_tokens = 64;
  // --device cpu: compute threads of each spawned rank; 0: the CPUs tpserve may run on
  // (its affinity mask) shared out evenly between the --tp ranks, at least 1 each.
  int cpu_threads_per_rank = 0;
  int drain_grace_ms = 30000;         // in-flight requests get this long after SIGTERM
  // The public port's security; main reads the files at start (server/tls_files.h,
  // server/auth.h). No TLS files: plaintext. --tls-client-ca-file: clients must present
  // a certificate it signed. --api-key-file: tpserve.v1.Inference calls need
  // "authorization: Bearer KEY".
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_client_ca_file;
  std::string api_key_file;
  // Logging (base/log.h): the least severe level logged, by the server and its workers;
  // the stats line every this many seconds (0: never); one line per finished request.
  std::string log_level = "info";
  int log_stats_interval_s = 10;
  bool disable_log_requests = false;

  absl::Status Validate() const;
  // The dtype served: dtype unless "auto"; for "auto" on cpu `checkpoint_dtype` (what
  // the model's config.json says, else its weights' dtype) mapped to float32 or
  // bfloat16, on cuda bfloat16.
  std::string ComputeDType(DType checkpoint_dtype) const;
};

// Parses tpserve's command line (and the TPSERVE_* environment variables). nullopt:
// --help or --version was printed, exit 0. InvalidArgument names the flag, with a hint
// at --help on its own line.
absl::StatusOr<std::optional<ServerConfig>> ParseServerFlags(int argc, char** argv);

}  // namespace tpserve

#endif  // TPSERVE_SERVER_SERVER_CONFIG_H_
