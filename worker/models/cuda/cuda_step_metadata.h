// One step's batch as the CUDA kernels read it: token ids, positions, cache slots,
// per-sequence query offsets, context lengths and block tables, and the rows that need
// logits — packed into one pinned host buffer and sent with a single async copy.
//
// PackStepMetadata is the pure host part (tested on any machine); the stager owns the
// pinned and device buffers, sized once for the model's limits. One rank's compute
// thread; a Stage() may only reuse the buffers once the previous step has drained.
#ifndef TPSERVE_WORKER_MODELS_CUDA_CUDA_STEP_METADATA_H_
#define TPSERVE_WORKER_MODELS_CUDA_CUDA_STEP_METADATA_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "worker/cuda/device_buffer.h"
#include "worker/cuda/pinned_buffer.h"
#include "worker/kernels/cpu/rope.h"
#include "worker/kernels/cuda/paged_attention.h"
#include "worker/step_batch.h"

namespace tpserve {

// Byte offsets of each array in the packed buffer (16-byte aligned), for one step.
struct StepMetadataLayout {
  int64_t num_tokens = 0, num_seqs = 0, num_logit_rows = 0, table_width = 0;
  size_t token_ids = 0;     // int32 [num_tokens]
  size_t positions = 0;     // int32 [num_tokens]
  size_t query_start = 0;   // int32 [num_seqs + 1]
  size_t context_lens = 0;  // int32 [num_seqs]
  size_t logit_rows = 0;    // int32 [num_logit_rows]: token rows that need logits, in order
  size_t block_tables = 0;  // int32 [num_seqs, table_width], unused entries 0
  size_t slots = 0;         // int64 [num_tokens]
  size_t bytes = 0;         // total
};

StepMetadataLayout PlanStepMetadata(int64_t num_tokens, int64_t num_seqs,
                                    int64_t num_logit_rows, int64_t table_width);

// The layout `batch` needs: its table width is its longest block table.
StepMetadataLayout PlanStepMetadata(const StepBatch& batch);

// How a token's position becomes its row of the RoPE cos/sin table: the position itself,
// plus long_offset when longrope rotates it with its long set (rope->UsesLongFactors;
// RotaryEmbedding::CosSinTable puts that set's rows there). rope null: the position.
struct RopeRows {
  const RotaryEmbedding* rope = nullptr;
  int32_t long_offset = 0;
};

// Writes `batch` into `dst` (layout.bytes bytes) as `layout` describes; block tables are
// cut to layout.table_width (which must cover each sequence's context).
void PackStepMetadata(const StepBatch& batch, int block_size, const StepMetadataLayout& layout,
                      uint8_t* dst, const RopeRows& rope_rows = {});

// A decode batch (one new token per sequence, last-token logits) padded to
// `padded_seqs` sequences with a fixed block-table width, so that every step of that
// size has the same layout — the shape a captured CUDA graph replays. Padding sequences
// hold token 0 at position 0 with cache slot −1 (never written), context 1 and block 0.
StepBatch PadDecodeBatch(const StepBatch& batch, int padded_seqs);
StepMetadataLayout PlanPaddedDecode(int padded_seqs, int table_width);
// Overwrites the slots of the padding tokens (those from `real_tokens` on; a padded
// decode step has one real token per real sequence) with −1.
void MarkPaddingSlots(int real_tokens, const StepMetadataLayout& layout, uint8_t* dst);

// Device pointers into the staged buffer, plus the sizes the kernels take.
struct CudaStepMetadata {
  const int32_t* token_ids = nullptr;   // [num_tokens]
  const int32_t* positions = nullptr;   // [num_tokens] RoPE table rows (RopeRows)
  const int64_t* slots = nullptr;       // [num_tokens]
  const int32_t* logit_rows = nullptr;  // [num_logit_rows]
  AttentionMetadata attention;
  int64_t num_tokens = 0;
  int64_t num_logit_rows = 0;
};

class CudaStepMetadataStager {
 public:
  // `rope_rows.rope`, when set, outlives the stager.
  static absl::StatusOr<std::unique_ptr<CudaStepMetadataStager>> Create(
      int max_tokens, int max_seqs, int max_blocks_per_seq, int block_size,
      const RopeRows& rope_rows = {});

  // Packs `batch` (already validated against the cache) and enqueues its copy on
  // `stream`. INVALID_ARGUMENT when it exceeds max_tokens or max_seqs.
  absl::StatusOr<CudaStepMetadata> Stage(const StepBatch& batch, cudaStream_t stream);
  // The same for a decode batch padded to `padded_seqs` sequences and a table width of
  // `table_width` (PadDecodeBatch): the returned pointers and sizes depend only on those
  // two numbers, so a graph captured on one step replays with the next one's data.
  absl::StatusOr<CudaStepMetadata> StageDecode(const StepBatch& batch, int padded_seqs,
                                               int table_width, cudaStream_t stream);

 private:
  absl::StatusOr<CudaStepMetadata> Send(const StepBatch& batch, const StepMetadataLayout& layout,
                                        int real_tokens, cudaStream_t stream);
  CudaStepMetadataStager(int max_tokens, int max_seqs, int block_size, const RopeRows& rope_rows)
      : max_tokens_(max_tokens),
        max_seqs_(max_seqs),
        block_size_(block_size),
        rope_rows_(rope_rows) {}
  int max_tokens_, max_seqs_, block_size_;
  RopeRows rope_rows_;
  PinnedBuffer host_;
  DeviceBuffer device_;
};

}  // namespace tpserve

#endif  // TPSERVE_WORKER_MODELS_CUDA_CUDA_STEP_METADATA_H_
