#include "server/server_config.h"

#include <stdlib.h>

#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

absl::StatusOr<std::optional<ServerConfig>> ParseOrExit(std::vector<std::string> args) {
  args.insert(args.begin(), "tpserve");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return ParseServerFlags(static_cast<int>(argv.size()), argv.data());
}

absl::StatusOr<ServerConfig> Parse(std::vector<std::string> args) {
  absl::StatusOr<std::optional<ServerConfig>> c = ParseOrExit(std::move(args));
  if (!c.ok()) return c.status();
  if (!c->has_value()) return absl::InternalError("the parser asked to exit");
  return **c;
}

TEST(ServerConfigTest, ParsesEveryFlag) {
  absl::StatusOr<ServerConfig> c = Parse({"--model",
                                          "/m",
                                          "--tp=2",
                                          "--device",
                                          "cuda",
                                          "--port",
                                          "0",
                                          "--host",
                                          "127.0.0.1",
                                          "--external-workers",
                                          "--exit-on-pool-failure",
                                          "--kv-blocks",
                                          "64",
                                          "--max-batch-tokens",
                                          "512",
                                          "--max-sequences",
                                          "8",
                                          "--max-queue",
                                          "9",
                                          "--step-timeout-ms",
                                          "1000",
                                          "--worker-binary",
                                          "/w",
                                          "--metrics-port",
                                          "9090",
                                          "--no-prefix-caching",
                                          "--no-staggered-admission",
                                          "--warmup-tokens",
                                          "0"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model_dir, "/m");
  EXPECT_EQ(c->tp, 2);
  EXPECT_EQ(c->device, "cuda");
  EXPECT_EQ(c->port, 0);
  EXPECT_EQ(c->host, "127.0.0.1");
  EXPECT_TRUE(c->external_workers);
  EXPECT_TRUE(c->exit_on_pool_failure);
  EXPECT_EQ(c->kv_blocks, 64);
  EXPECT_EQ(c->limits.max_batch_tokens(), 512);
  EXPECT_EQ(c->limits.max_sequences(), 8);
  EXPECT_EQ(c->max_queue, 9);
  EXPECT_EQ(c->step_timeout_ms, 1000);
  EXPECT_EQ(c->worker_binary, "/w");
  EXPECT_EQ(c->metrics_port, 9090);
  EXPECT_TRUE(c->no_prefix_caching);
  EXPECT_TRUE(c->no_staggered_admission);
  EXPECT_EQ(c->warmup_tokens, 0);
  EXPECT_EQ(c->ComputeDType(DType::kF32), "bfloat16");  // cuda's auto
}

TEST(ServerConfigTest, DtypeAndGpuMemoryFraction) {
  absl::StatusOr<ServerConfig> c = Parse({"--model", "/m", "--port", "0", "--device", "cuda",
                                          "--dtype", "float32", "--gpu-memory-fraction", "0.5"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->ComputeDType(DType::kBF16), "float32");  // as asked, whatever the checkpoint
  EXPECT_DOUBLE_EQ(c->gpu_memory_fraction, 0.5);
  EXPECT_FALSE(c->enforce_eager);
  c = Parse({"--model", "/m", "--port", "0", "--device", "cuda", "--enforce-eager"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->enforce_eager);
  c = Parse({"--model", "/m", "--port", "0"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->dtype, "auto");  // cpu's auto follows the checkpoint
  EXPECT_EQ(c->ComputeDType(DType::kF32), "float32");
  EXPECT_EQ(c->ComputeDType(DType::kBF16), "bfloat16");
  EXPECT_EQ(c->ComputeDType(DType::kF16), "bfloat16");
  EXPECT_FALSE(Parse({"--model", "/m", "--port", "0", "--dtype", "float16"}).ok());
  EXPECT_EQ(c->metrics_port, -1);  // off unless asked
  EXPECT_FALSE(c->no_prefix_caching);
  EXPECT_FALSE(c->no_staggered_admission);
  EXPECT_EQ(c->quantization, "none");
  // int8 keeps the embedding table in bf16: auto serves bfloat16, even an fp32 checkpoint.
  c = Parse({"--model", "/m", "--port", "0", "--quantization", "int8"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->ComputeDType(DType::kF32), "bfloat16");
}

TEST(ServerConfigTest, SecurityFlags) {
  absl::StatusOr<ServerConfig> c = Parse({"--model", "/m", "--port", "0"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->host, "0.0.0.0");  // every interface unless asked
  EXPECT_TRUE(c->tls_cert_file.empty() && c->tls_key_file.empty());
  EXPECT_TRUE(c->tls_client_ca_file.empty() && c->api_key_file.empty());
  c = Parse({"--model", "/m", "--port", "0", "--tls-cert-file", "/c.pem", "--tls-key-file",
             "/k.pem", "--tls-client-ca-file", "/ca.pem", "--api-key-file", "/keys"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->tls_cert_file, "/c.pem");
  EXPECT_EQ(c->tls_key_file, "/k.pem");
  EXPECT_EQ(c->tls_client_ca_file, "/ca.pem");
  EXPECT_EQ(c->api_key_file, "/keys");
  // An API key without TLS is allowed (a trusted network, or TLS ended in front).
  EXPECT_TRUE(Parse({"--model", "/m", "--port", "0", "--api-key-file", "/keys"}).ok());
}

TEST(ServerConfigTest, BadFlagsNameTheFlag) {
  const struct {
    std::vector<std::string> args;
    std::string message;
  } cases[] = {
      {{"--port", "1"}, "--model is required"},
      {{"--model", "/m", "--port", "70000"}, "--port must be in [0, 65535], got 70000"},
      {{"/m", "--model", "/n"}, "the model is given twice"},
      {{"--model", "/m", "--port", "1", "--device", "tpu"}, "--device must be cpu or cuda"},
      {{"--model", "/m", "--port", "1", "--tp", "0"}, "--tp must be in [1, 1024], got 0"},
      {{"--model", "/m", "--port", "1", "--cpu-threads-per-rank", "1025"},
       "--cpu-threads-per-rank must be in [0, 1024], got 1025"},
      {{"--model", "/m", "--port", "1", "--device", "cuda", "--cpu-threads-per-rank", "2"},
       "--cpu-threads-per-rank applies to --device cpu only"},
      {{"--model", "/m", "--port", "1", "--external-workers", "--cpu-threads-per-rank", "2"},
       "external workers take their own --threads"},
      {{"--model", "/m", "--port", "1", "--warmup-tokens", "-1"},
       "--warmup-tokens must be in [0, 65536], got -1"},
      {{"--model", "/m", "--port", "1", "--warmup-tokens", "65537"},
       "--warmup-tokens must be in [0, 65536], got 65537"},
      {{"--model", "/m", "--port", "1", "--metrics-port", "70000"},
       "--metrics-port must be in [-1, 65535], got 70000"},
      {{"--model", "/m", "--port", "1", "--kv-blocks", "4", "--kv-memory-mb", "4"},
       "give --kv-blocks or --kv-memory-mb, not both"},
      {{"--model", "/m", "--port", "1", "--max-queue", "99999999999"}, "--max-queue must be in"},
      {{"--model", "/m", "--port", "1", "--tp", "x"}, "--tp needs an integer"},
      {{"--model", "/m", "--port", "1", "stray"}, "the model is given twice"},
      {{"/m", "stray"}, "unexpected argument \"stray\""},
      {{"--bogus"}, "unknown flag --bogus"},
      {{"--model", "/m", "--port", "1", "--dtype", "float16"},
       "--dtype \"float16\": expected auto, float32 or bfloat16"},
      {{"--model", "/m", "--port", "1", "--device", "cuda", "--dtype", "float16"},
       "expected auto, float32 or bfloat16"},
      {{"--model", "/m", "--port", "1", "--quantization", "int4"},
       "--quantization \"int4\": expected none or int8"},
      {{"--model", "/m", "--port", "1", "--device", "cuda", "--quantization", "int8"},
       "--quantization int8 is served by the cpu backend only"},
      {{"--model", "/m", "--port", "1", "--dtype", "float32", "--quantization", "int8"},
       "--dtype must be auto or bfloat16, not float32"},
      {{"--model", "/m", "--port", "1", "--kv-cache-dtype", "fp8"},
       "--kv-cache-dtype \"fp8\": expected auto, float32 or bfloat16"},
      {{"--model", "/m", "--port", "1", "--device", "cuda", "--dtype", "bfloat16",
        "--kv-cache-dtype", "float32"},
       "the cuda KV cache holds --dtype (bfloat16)"},
      {{"--model", "/m", "--port", "1", "--device", "cuda", "--gpu-memory-fraction", "1.5"},
       "--gpu-memory-fraction must be in (0, 1], got 1.5"},
      {{"--model", "/m", "--port", "1", "--enforce-eager"},
       "--enforce-eager applies to --device cuda only"},
      {{"--model", "/m", "--port", "1", "--tls-cert-file", "/c.pem"},
       "give --tls-cert-file and --tls-key-file together"},
      {{"--model", "/m", "--port", "1", "--tls-key-file", "/k.pem"},
       "give --tls-cert-file and --tls-key-file together"},
      {{"--model", "/m", "--port", "1", "--tls-client-ca-file", "/ca.pem"},
       "--tls-client-ca-file needs --tls-cert-file and --tls-key-file"},
  };
  for (const auto& c : cases) {
    const absl::StatusOr<ServerConfig> config = Parse(c.args);
    ASSERT_FALSE(config.ok()) << c.message;
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(config.status().message().find(c.message), std::string::npos)
        << config.status();
    EXPECT_NE(config.status().message().find("\nrun 'tpserve --help' for the flags"),
              std::string::npos);
  }
}

TEST(ServerConfigTest, DefaultsToPort50051AndTakesTheModelAsPositional) {
  absl::StatusOr<ServerConfig> c = Parse({"/models/m"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->port, 50051);
  EXPECT_EQ(c->model_dir, "/models/m");
}

TEST(ServerConfigTest, TakesVllmNames) {
  absl::StatusOr<ServerConfig> c = Parse(
      {"--model", "/m", "--tensor-parallel-size", "2", "--max-model-len", "512",
       "--max-num-seqs", "8", "--max-num-batched-tokens", "1024", "--device", "cuda",
       "--gpu-memory-utilization", "0.5", "--served-model-name", "llama",
       "--no-enable-prefix-caching"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->tp, 2);
  EXPECT_EQ(c->limits.max_context(), 512);
  EXPECT_EQ(c->limits.max_sequences(), 8);
  EXPECT_EQ(c->limits.max_batch_tokens(), 1024);
  EXPECT_EQ(c->gpu_memory_fraction, 0.5);
  EXPECT_EQ(c->model_name, "llama");
  EXPECT_TRUE(c->no_prefix_caching);
}

TEST(ServerConfigTest, EnvironmentVariablesFillUnsetFlags) {
  setenv("TPSERVE_MODEL", "/env/model", 1);
  setenv("TPSERVE_TP", "4", 1);
  setenv("TPSERVE_MAX_CONTEXT", "256", 1);
  setenv("TPSERVE_NO_PREFIX_CACHING", "true", 1);
  absl::StatusOr<ServerConfig> c = Parse({"--tp", "2"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model_dir, "/env/model");
  EXPECT_EQ(c->tp, 2);  // the command line wins
  EXPECT_EQ(c->limits.max_context(), 256);
  EXPECT_TRUE(c->no_prefix_caching);
  setenv("TPSERVE_TP", "many", 1);
  c = Parse({});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("TPSERVE_TP (--tp) needs an integer"), std::string::npos)
      << c.status();
  for (const char* name :
       {"TPSERVE_MODEL", "TPSERVE_TP", "TPSERVE_MAX_CONTEXT", "TPSERVE_NO_PREFIX_CACHING"}) {
    unsetenv(name);
  }
}

TEST(ServerConfigTest, HelpAndVersionExitWithoutAConfig) {
  for (const char* flag : {"--help", "-h", "--version"}) {
    testing::internal::CaptureStdout();
    absl::StatusOr<std::optional<ServerConfig>> c = ParseOrExit({flag});
    const std::string out = testing::internal::GetCapturedStdout();
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_FALSE(c->has_value()) << flag;
    EXPECT_NE(out.find(std::string(flag) == "--version" ? "tpserve 0." : "--port INT=50051"),
              std::string::npos)
        << out;
  }
}

}  // namespace
}  // namespace tpserve
