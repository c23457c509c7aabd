// Loading in the CPU backend's bf16 mode holds no fp32 copy of the weights at any time:
// the process's peak resident set while LoadWeights(kBFloat16) runs stays within 15% of
// the bf16 weights it ends up holding, plus a fixed allowance (a tensor's mapped pages
// and its staging copy, oneDNN's JIT code). Any fp32 copy of the layers, of the
// embedding table or of a whole checkpoint tensor, or mapped checkpoint pages left
// resident, would overshoot: the fp32 weights alone are twice the bf16 ones. In the
// int8 mode every weight is quantized as its rows are read: no bf16 copy of one, nor the
// LM head's whole mapping, is held beside the int8 weights.
//
// The peak is /proc/self/status VmHWM after resetting it (clear_refs "5", Linux >= 4.0).
#include <malloc.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/comm/local_comm_group.h"
#include "worker/kernels/cpu/bf16_gemm.h"
#include "worker/models/model_files.h"
#include "worker/tensor.h"
#include "worker/tools/synthetic_checkpoint.h"

namespace tpserve {
namespace {

// A /proc/self/status field in bytes ("VmRSS", "VmHWM"), or -1.
int64_t StatusBytes(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1)) * 1024;
  }
  return -1;
}

bool ResetPeak() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
  clear.flush();
  return clear.good();
}

SyntheticLlama Spec(DType dtype) {
  SyntheticLlama spec;
  spec.hidden_size = 512;
  spec.intermediate_size = 2048;
  spec.num_layers = 4;
  spec.num_heads = 8;
  spec.num_kv_heads = 2;
  spec.vocab_size = 4096;
  spec.dtype = dtype;
  spec.seed = 7;
  return spec;
}

struct LoadPeak {
  int64_t weight_bytes = 0;  // bytes the model holds (CpuWeightBytes)
  int64_t growth = 0;        // peak RSS during the load minus RSS before it
};

LoadPeak MeasureLoad(const SyntheticLlama& spec, const std::string& name,
                     CpuWeights weights = CpuWeights::kBFloat16) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  EXPECT_TRUE(WriteSyntheticLlama(dir, spec).ok());
  absl::StatusOr<ModelFiles> files = OpenModel(dir, 1);
  EXPECT_TRUE(files.ok()) << files.status();
  auto comms = LocalCommGroup::Create(1);
  absl::StatusOr<std::unique_ptr<LlamaModel>> model =
      LlamaModel::Create(files->config, comms[0].get());
  EXPECT_TRUE(model.ok()) << model.status();
  {  // oneDNN's one-time setup (its code pages, the OpenMP runtime) is not the load's
    std::vector<uint16_t> w(64 * 64, 0x3f80);
    EXPECT_TRUE(PackedBf16Weight::FromBf16(w.data(), 64, 64).ok());
  }
  TrimTensorStorage();  // what earlier tests freed is not this load's: neither the blocks
  malloc_trim(0);       // kept for reuse nor malloc's free lists
  EXPECT_TRUE(ResetPeak());
  const int64_t before = StatusBytes("VmRSS");
  const absl::Status loaded = (*model)->LoadWeights(*files->checkpoint, weights);
  EXPECT_TRUE(loaded.ok()) << loaded;
  LoadPeak peak;
  peak.growth = StatusBytes("VmHWM") - before;
  peak.weight_bytes = CpuWeightBytes(files->config, 1, weights);
  EXPECT_EQ((*model)->lm_head().packed_format(), PackedWeightFormat(weights));
  EXPECT_TRUE((*model)->embedding().weight_is_bf16());
  EXPECT_TRUE((*model)->embedding().weight().empty());
  return peak;
}

// A tensor's mapped pages and its staging copy (the largest here: the 4 MiB table, and
// gate_up's 4 MiB), oneDNN's first JIT kernels and allocator slack.
constexpr int64_t kAllowance = 12 << 20;

TEST(LlamaBf16LoadTest, Bf16CheckpointLoadsWithoutAnyFp32Copy) {
  const LoadPeak peak = MeasureLoad(Spec(DType::kBF16), "bf16");
  std::printf("bf16 checkpoint: weights %.1f MiB, peak growth %.1f MiB\n",
              peak.weight_bytes / 1048576.0, peak.growth / 1048576.0);
  EXPECT_LE(peak.growth, peak.weight_bytes * 115 / 100 + kAllowance);
  EXPECT_GE(peak.growth, peak.weight_bytes * 9 / 10);  // the measurement sees the weights
}

// int8 with a large vocab (32768 x 512): a bf16 copy of the head (32 MiB) and its mapped
// pages (32 MiB) beside the int8 weights (about 56 MiB), or the embedding table's whole
// mapping beside its copy, would overshoot by far.
TEST(LlamaBf16LoadTest, Int8HeadIsQuantizedAsItIsRead) {
  SyntheticLlama spec = Spec(DType::kBF16);
  spec.vocab_size = 32768;
  spec.num_layers = 2;
  const LoadPeak peak = MeasureLoad(spec, "int8", CpuWeights::kInt8);
  std::printf("int8: weights %.1f MiB, peak growth %.1f MiB\n", peak.weight_bytes / 1048576.0,
              peak.growth / 1048576.0);
  // A chunk of a tensor (4 MiB) and its mapped pages, and the 2 MiB pages of each
  // packed weight's last stretch: no weight is staged in bf16.
  EXPECT_LE(peak.growth, peak.weight_bytes * 105 / 100 + (16 << 20));
  EXPECT_GE(peak.growth, peak.weight_bytes * 9 / 10);
}

// int8 with layers far larger than the head (hidden 1024, MLP 4096: 15 MiB of int8 a
// layer): a layer's bf16 staging (30 MiB) beside the int8 weights (about 42 MiB) would
// overshoot.
TEST(LlamaBf16LoadTest, Int8LayersAreQuantizedAsTheyAreRead) {
  SyntheticLlama spec = Spec(DType::kBF16);
  spec.hidden_size = 1024;
  spec.intermediate_size = 4096;
  spec.num_layers = 2;
  const LoadPeak peak = MeasureLoad(spec, "int8_layers", CpuWeights::kInt8);
  std::printf("int8 layers: weights %.1f MiB, peak growth %.1f MiB\n",
              peak.weight_bytes / 1048576.0, peak.growth / 1048576.0);
  EXPECT_LE(peak.growth, peak.weight_bytes * 105 / 100 + (16 << 20));
  EXPECT_GE(peak.growth, peak.weight_bytes * 9 / 10);
}

TEST(LlamaBf16LoadTest, Fp32CheckpointIsRoundedTensorByTensor) {
  const LoadPeak peak = MeasureLoad(Spec(DType::kF32), "f32");
  std::printf("f32 checkpoint: weights %.1f MiB, peak growth %.1f MiB\n",
              peak.weight_bytes / 1048576.0, peak.growth / 1048576.0);
  // Plus the largest tensor's fp32 pages while it is rounded (8 MiB here).
  EXPECT_LE(peak.growth, peak.weight_bytes * 115 / 100 + kAllowance + (8 << 20));
}

}  // namespace
}  // namespace tpserve
