// BuildRank's checks of an Assignment, and the CUDA path on a machine without a GPU: each
// bad assignment is an error naming the field, and a CUDA rank that cannot get a device
// says so instead of crashing or waiting for peers.
#include "worker/rank/rank_builder.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "gtest/gtest.h"
#include "worker/cuda/cuda_status.h"
#include "worker/loader/safetensors_writer.h"
#include "worker/models/llama_tensors.h"

namespace tpserve {
namespace {

std::string FixtureDir(const std::string& name) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  return std::string(srcdir ? srcdir : ".") + "/tpserve/tests/data/models/" + name;
}

worker::v1::Assignment CudaAssignment() {
  worker::v1::Assignment a;
  a.set_rank(0);
  a.set_world_size(1);
  a.set_model_dir(FixtureDir("llama_gqa"));
  a.set_device("cuda:0");
  a.set_dtype("bfloat16");
  a.set_comm_backend("nccl");
  a.set_store_host("127.0.0.1");
  a.set_store_port(1);
  a.set_store_key_prefix("test/gen1");
  a.set_comm_timeout_ms(500);
  a.mutable_kv_cache()->set_block_size(16);
  a.mutable_kv_cache()->set_memory_fraction(0.5);
  *a.mutable_limits() = DefaultBatchLimits();
  return a;
}

void ExpectError(const worker::v1::Assignment& a, absl::StatusCode code, const std::string& text) {
  absl::StatusOr<std::unique_ptr<RankExecutor>> rank = BuildRank(a);
  ASSERT_FALSE(rank.ok()) << text;
  EXPECT_EQ(rank.status().code(), code) << rank.status();
  EXPECT_NE(rank.status().message().find(text), std::string::npos) << rank.status();
}

TEST(BuildRankTest, ContextPastTheModelsPositionsIsRefused) {
  worker::v1::Assignment a = CudaAssignment();
  a.set_device("cpu");
  a.set_dtype("float32");
  a.set_comm_backend("gloo");
  a.mutable_limits()->set_max_context(513);  // llama_gqa has 512 positions
  ExpectError(a, absl::StatusCode::kInvalidArgument,
              "max_context 513 exceeds the model's max_position_embeddings 512");
}

// A count no host can hold is an error naming the numbers, not bad_alloc or the OOM
// killer.
TEST(BuildRankTest, KvCacheBeyondTheHostsMemoryIsResourceExhausted) {
  worker::v1::Assignment a = CudaAssignment();
  a.set_device("cpu");
  a.set_dtype("float32");
  a.set_comm_backend("gloo");
  a.mutable_kv_cache()->set_num_blocks(1 << 30);  // 4 TiB of llama_gqa blocks
  ExpectError(a, absl::StatusCode::kResourceExhausted, "more than the host's available memory");
}

worker::v1::Assignment CpuAssignment() {
  worker::v1::Assignment a = CudaAssignment();
  a.set_device("cpu");
  a.set_dtype("float32");
  a.set_comm_backend("gloo");
  a.mutable_kv_cache()->set_memory_fraction(0);
  return a;
}

// A checkpoint whose fp32 shards cannot fit in the host's memory is refused before any
// is allocated, naming the numbers. The checkpoint is a sparse file (256 GiB of bf16
// zeros that take no disk), valid in every header, so only the memory check can stop it.
TEST(BuildRankTest, WeightsThatCannotFitAreRefusedBeforeLoading) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/huge_model";
  std::filesystem::create_directories(dir);
  const nlohmann::json config = {
      {"architectures", {"LlamaForCausalLM"}}, {"hidden_size", 16384},
      {"intermediate_size", 16},               {"vocab_size", 1 << 23},
      {"num_hidden_layers", 1},                {"num_attention_heads", 128},
      {"num_key_value_heads", 128},            {"max_position_embeddings", 64},
      {"tie_word_embeddings", true},           {"dtype", "bfloat16"}};
  std::ofstream(dir + "/config.json") << config.dump();
  nlohmann::json header = nlohmann::json::object();
  int64_t offset = 0;
  for (const ExpectedTensor& t :
       LlamaCheckpointTensors(*ParseModelConfig(config.dump(), "config.json"))) {
    const int64_t bytes = NumElements(t.shape) * 2;
    header[t.name] = {{"dtype", "BF16"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const std::string path = dir + "/model.safetensors";
  ASSERT_TRUE(WriteBinaryFile(path, FrameSafetensors(text, "")).ok());
  std::filesystem::resize_file(path, 8 + text.size() + offset);  // sparse: zeros, no blocks

  worker::v1::Assignment a = CpuAssignment();
  a.set_model_dir(dir);
  a.mutable_kv_cache()->set_num_blocks(1);
  ExpectError(a, absl::StatusCode::kResourceExhausted,
              "bytes per rank in fp32 (554054123520 bytes for the 1 rank(s) of this host), more "
              "than the host's available memory");  // With bf16 weights the check counts what the bf16 load holds: about half.
  a.set_dtype("bfloat16");
  ExpectError(a, absl::StatusCode::kResourceExhausted, "bytes per rank in bf16 (");
  a.set_quantization("int8");
  ExpectError(a, absl::StatusCode::kResourceExhausted, "bytes per rank in int8 (");
}

// An int8 rank loads and serves; quantization is refused by name where it cannot apply.
TEST(BuildRankTest, Int8QuantizationNeedsCpuAndBf16) {
  worker::v1::Assignment a = CpuAssignment();
  a.set_dtype("bfloat16");
  a.set_quantization("int8");
  a.mutable_kv_cache()->set_num_blocks(4);
  absl::StatusOr<std::unique_ptr<RankExecutor>> int8 = BuildRank(a);
  ASSERT_TRUE(int8.ok()) << int8.status();
  a.set_dtype("float32");
  ExpectError(a, absl::StatusCode::kInvalidArgument,
              "quantization int8 needs dtype \"bfloat16\"");
  a.set_dtype("bfloat16");
  a.set_quantization("int4");
  ExpectError(a, absl::StatusCode::kInvalidArgument, "quantization \"int4\": expected");
  a = CudaAssignment();
  a.set_quantization("int8");
  ExpectError(a, absl::StatusCode::kUnimplemented, "the CUDA backend has none");
}

// The one KV budget rule: blocks as assigned, else as many as the bytes hold, else the
// fraction of free memory; a budget below one block, or none at all, is refused.
TEST(BuildRankTest, TheKvCacheHoldsWhatTheBudgetBuys) {
  worker::v1::Assignment a = CpuAssignment();
  a.mutable_kv_cache()->set_num_blocks(7);
  absl::StatusOr<std::unique_ptr<RankExecutor>> blocks = BuildRank(a);
  ASSERT_TRUE(blocks.ok()) << blocks.status();
  EXPECT_EQ((*blocks)->num_kv_blocks(), 7);

  a.mutable_kv_cache()->set_num_blocks(0);
  a.mutable_kv_cache()->set_memory_bytes(int64_t{1} << 20);
  absl::StatusOr<std::unique_ptr<RankExecutor>> one_mib = BuildRank(a);
  ASSERT_TRUE(one_mib.ok()) << one_mib.status();
  a.mutable_kv_cache()->set_memory_bytes(int64_t{2} << 20);
  absl::StatusOr<std::unique_ptr<RankExecutor>> two_mib = BuildRank(a);
  ASSERT_TRUE(two_mib.ok()) << two_mib.status();
  EXPECT_GT((*one_mib)->num_kv_blocks(), 1);
  EXPECT_NEAR((*two_mib)->num_kv_blocks(), 2 * (*one_mib)->num_kv_blocks(), 1);

  a.mutable_kv_cache()->set_memory_bytes(1);
  ExpectError(a, absl::StatusCode::kResourceExhausted, "a budget of 1 bytes holds no block of");
  a.mutable_kv_cache()->set_memory_bytes(0);
  ExpectError(a, absl::StatusCode::kInvalidArgument,
              "kv cache: set num_blocks or a positive memory budget");
  a.mutable_kv_cache()->set_memory_fraction(0.001);
  absl::StatusOr<std::unique_ptr<RankExecutor>> fraction = BuildRank(a);
  ASSERT_TRUE(fraction.ok()) << fraction.status();
  EXPECT_GT((*fraction)->num_kv_blocks(), 0);
}

// A bf16 cache (the default in bf16 mode, or asked for) holds twice the blocks of an
// fp32 one in the same budget.
TEST(BuildRankTest, ABf16KvCacheHoldsTwiceTheBlocks) {
  worker::v1::Assignment a = CpuAssignment();
  a.mutable_kv_cache()->set_num_blocks(0);
  a.mutable_kv_cache()->set_memory_bytes(int64_t{4} << 20);
  absl::StatusOr<std::unique_ptr<RankExecutor>> fp32 = BuildRank(a);
  ASSERT_TRUE(fp32.ok()) << fp32.status();
  a.mutable_kv_cache()->set_dtype("bfloat16");
  absl::StatusOr<std::unique_ptr<RankExecutor>> bf16 = BuildRank(a);
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  EXPECT_NEAR((*bf16)->num_kv_blocks(), 2 * (*fp32)->num_kv_blocks(), 1);
  a.mutable_kv_cache()->set_dtype("");
  a.set_dtype("bfloat16");  // bf16 weights: the cache follows
  absl::StatusOr<std::unique_ptr<RankExecutor>> follows = BuildRank(a);
  ASSERT_TRUE(follows.ok()) << follows.status();
  EXPECT_EQ((*follows)->num_kv_blocks(), (*bf16)->num_kv_blocks());
  a.mutable_kv_cache()->set_dtype("float32");
  absl::StatusOr<std::unique_ptr<RankExecutor>> asked = BuildRank(a);
  ASSERT_TRUE(asked.ok()) << asked.status();
  EXPECT_EQ((*asked)->num_kv_blocks(), (*fp32)->num_kv_blocks());
  a.mutable_kv_cache()->set_dtype("int8");
  ExpectError(a, absl::StatusCode::kInvalidArgument, "kv_cache.dtype \"int8\"");
}

TEST(BuildRankTest, BadCudaAssignmentsNameTheField) {
  worker::v1::Assignment a = CudaAssignment();
  a.set_device("cuda:x");
  ExpectError(a, absl::StatusCode::kInvalidArgument, "cuda:<ordinal>");
  a = CudaAssignment();
  a.set_device("tpu");
  ExpectError(a, absl::StatusCode::kUnimplemented, "tpu");
  a = CudaAssignment();
  a.set_dtype("float16");
  ExpectError(a, absl::StatusCode::kInvalidArgument, "float16");
  a = CudaAssignment();
  a.set_comm_backend("gloo");
  ExpectError(a, absl::StatusCode::kInvalidArgument, "nccl");
  a = CudaAssignment();
  a.set_device("cpu");
  a.set_dtype("float16");
  ExpectError(a, absl::StatusCode::kUnimplemented, "float32, or with bfloat16 weights");
}

// Limits out of range (a frontend of another build, a hand-written Assignment) are refused
// before anything is loaded or sized for them.
TEST(BuildRankTest, BatchLimitsOutOfRangeAreRefusedByField) {
  worker::v1::Assignment a = CpuAssignment();
  a.clear_limits();
  ExpectError(a, absl::StatusCode::kInvalidArgument,
              "assignment: limits.max_batch_tokens must be in [1, 1073741824], got 0");
  a = CpuAssignment();
  a.mutable_limits()->set_max_sequences(1 << 21);
  ExpectError(a, absl::StatusCode::kInvalidArgument,
              "assignment: limits.max_sequences must be in [1, 1048576], got 2097152");
  a = CpuAssignment();
  a.mutable_limits()->set_max_context(-5);
  ExpectError(a, absl::StatusCode::kInvalidArgument, "limits.max_context must be in [0, ");
}

TEST(ForThisDeviceTest, TheWorkersDeviceFlagPicksTheGpuAndRefusesTheOtherKind) {
  worker::v1::Assignment a = CudaAssignment();
  a.set_device("cuda:5");
  EXPECT_EQ(ForThisDevice(a, "")->device(), "cuda:5");
  EXPECT_EQ(ForThisDevice(a, "cuda")->device(), "cuda:5");
  EXPECT_EQ(ForThisDevice(a, "cuda:1")->device(), "cuda:1");
  absl::StatusOr<worker::v1::Assignment> refused = ForThisDevice(a, "cpu");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("--device cpu"), std::string::npos);
  a.set_device("cpu");
  EXPECT_EQ(ForThisDevice(a, "cuda:0").status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(BuildRankTest, CudaRankWithoutADeviceFailsAtOnce) {
  if (CudaDeviceAvailable().ok()) GTEST_SKIP() << "a GPU is present";
  ExpectError(CudaAssignment(), absl::StatusCode::kFailedPrecondition, "CUDA");
}

}  // namespace
}  // namespace tpserve
