// CudaStepMetadataStager on the CPU emulator: what lands in device memory. Regression
// test for a prefill whose tokens past the number of sequences were staged as padding
// (slot −1), so their keys and values never reached the cache.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "worker/models/cuda/cuda_step_metadata.h"

namespace tpserve {
namespace {

std::vector<int64_t> DeviceSlots(const CudaStepMetadata& meta) {
  std::vector<int64_t> slots(meta.num_tokens);
  EXPECT_EQ(cudaMemcpy(slots.data(), meta.slots, slots.size() * sizeof(int64_t),
                       cudaMemcpyDeviceToHost),
            cudaSuccess);
  return slots;
}

TEST(CudaStepMetadataStagerTest, EveryPrefillTokenKeepsItsSlot) {
  absl::StatusOr<std::unique_ptr<CudaStepMetadataStager>> stager =
      CudaStepMetadataStager::Create(/*max_tokens=*/16, /*max_seqs=*/4,
                                     /*max_blocks_per_seq=*/4, /*block_size=*/4);
  ASSERT_TRUE(stager.ok()) << stager.status();
  StepBatch batch;  // one 5-token prefill in blocks 2, 1 (block size 4)
  batch.token_ids = {1, 2, 3, 4, 5};
  batch.seqs.push_back({5, 5, {2, 1}, false});
  absl::StatusOr<CudaStepMetadata> meta = (*stager)->Stage(batch, nullptr);
  ASSERT_TRUE(meta.ok()) << meta.status();
  EXPECT_EQ(DeviceSlots(*meta), (std::vector<int64_t>{8, 9, 10, 11, 4}));
}

TEST(CudaStepMetadataStagerTest, OnlyDecodePaddingHasNoSlot) {
  absl::StatusOr<std::unique_ptr<CudaStepMetadataStager>> stager =
      CudaStepMetadataStager::Create(16, 4, 4, 4);
  ASSERT_TRUE(stager.ok()) << stager.status();
  StepBatch batch;  // two decode steps at positions 5 and 2, padded to 4 sequences
  batch.token_ids = {7, 8};
  batch.seqs.push_back({1, 6, {3, 0}, false});
  batch.seqs.push_back({1, 3, {1}, false});
  absl::StatusOr<CudaStepMetadata> meta =
      (*stager)->StageDecode(batch, /*padded_seqs=*/4, /*table_width=*/4, nullptr);
  ASSERT_TRUE(meta.ok()) << meta.status();
  EXPECT_EQ(DeviceSlots(*meta), (std::vector<int64_t>{1, 6, -1, -1}));
}

}  // namespace
}  // namespace tpserve
