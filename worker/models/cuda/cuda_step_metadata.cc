#include "worker/models/cuda/cuda_step_metadata.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "worker/cuda/cuda_status.h"

namespace tpserve {
namespace {

size_t Align16(size_t offset) { return (offset + 15) / 16 * 16; }

}  // namespace

StepMetadataLayout PlanStepMetadata(int64_t num_tokens, int64_t num_seqs, int64_t num_logit_rows,
                                    int64_t table_width) {
  StepMetadataLayout l;
  l.num_tokens = num_tokens;
  l.num_seqs = num_seqs;
  l.num_logit_rows = num_logit_rows;
  l.table_width = table_width;
  size_t at = 0;
  auto take = [&at](size_t bytes) {
    const size_t offset = at;
    at = Align16(at + bytes);
    return offset;
  };
  l.token_ids = take(num_tokens * 4);
  l.positions = take(num_tokens * 4);
  l.query_start = take((num_seqs + 1) * 4);
  l.context_lens = take(num_seqs * 4);
  l.logit_rows = take(num_logit_rows * 4);
  l.block_tables = take(num_seqs * table_width * 4);
  l.slots = take(num_tokens * 8);
  l.bytes = at;
  return l;
}

StepMetadataLayout PlanStepMetadata(const StepBatch& batch) {
  int64_t width = 1;
  for (const SequenceStep& s : batch.seqs) {
    width = std::max<int64_t>(width, static_cast<int64_t>(s.block_table.size()));
  }
  return PlanStepMetadata(static_cast<int64_t>(batch.token_ids.size()),
                          static_cast<int64_t>(batch.seqs.size()), batch.NumLogitRows(), width);
}

void PackStepMetadata(const StepBatch& batch, int block_size, const StepMetadataLayout& layout,
                      uint8_t* dst, const RopeRows& rope_rows) {
  std::memset(dst, 0, layout.bytes);
  auto i32 = [dst](size_t offset) { return reinterpret_cast<int32_t*>(dst + offset); };
  std::memcpy(i32(layout.token_ids), batch.token_ids.data(), batch.token_ids.size() * 4);
  std::vector<int32_t> positions = batch.Positions();
  if (rope_rows.rope != nullptr && rope_rows.rope->has_long_factors()) {
    const std::vector<uint8_t> long_set = rope_rows.rope->LongFactorFlags(batch);
    for (size_t t = 0; t < positions.size(); ++t) {
      if (long_set[t] != 0) positions[t] += rope_rows.long_offset;
    }
  }
  std::memcpy(i32(layout.positions), positions.data(), positions.size() * 4);
  const std::vector<int64_t> slots = batch.Slots(block_size);
  std::memcpy(dst + layout.slots, slots.data(), slots.size() * 8);
  int32_t* query_start = i32(layout.query_start);
  int32_t* logit_rows = i32(layout.logit_rows);
  int32_t token = 0;
  query_start[0] = 0;
  for (size_t s = 0; s < batch.seqs.size(); ++s) {
    const SequenceStep& seq = batch.seqs[s];
    const int32_t first = seq.all_logits ? token : token + seq.num_new_tokens - 1;
    for (int32_t t = first; t < token + seq.num_new_tokens; ++t) *logit_rows++ = t;
    token += seq.num_new_tokens;
    query_start[s + 1] = token;
    i32(layout.context_lens)[s] = seq.context_len;
    // A table may run past the blocks its context needs; those are never read.
    const size_t entries = std::min<size_t>(seq.block_table.size(), layout.table_width);
    std::memcpy(i32(layout.block_tables) + s * layout.table_width, seq.block_table.data(),
                entries * 4);
  }
}

StepBatch PadDecodeBatch(const StepBatch& batch, int padded_seqs) {
  StepBatch padded = batch;
  for (int s = static_cast<int>(batch.seqs.size()); s < padded_seqs; ++s) {
    padded.token_ids.push_back(0);
    padded.seqs.push_back({1, 1, {0}, false});
  }
  return padded;
}

StepMetadataLayout PlanPaddedDecode(int padded_seqs, int table_width) {
  return PlanStepMetadata(padded_seqs, padded_seqs, padded_seqs, table_width);
}

void MarkPaddingSlots(int real_tokens, const StepMetadataLayout& layout, uint8_t* dst) {
  int64_t* slots = reinterpret_cast<int64_t*>(dst + layout.slots);
  for (int64_t t = real_tokens; t < layout.num_tokens; ++t) slots[t] = -1;
}

absl::StatusOr<std::unique_ptr<CudaStepMetadataStager>> CudaStepMetadataStager::Create(
    int max_tokens, int max_seqs, int max_blocks_per_seq, int block_size,
    const RopeRows& rope_rows) {
  if (max_tokens < 1 || max_seqs < 1 || max_blocks_per_seq < 1 || block_size < 1) {
    return absl::InvalidArgumentError("step metadata limits must be positive");
  }
  std::unique_ptr<CudaStepMetadataStager> stager(
      new CudaStepMetadataStager(max_tokens, max_seqs, block_size, rope_rows));
  // Every row of a step may need logits (all_logits), so logit rows ≤ tokens.
  const size_t bytes = PlanStepMetadata(max_tokens, max_seqs, max_tokens, max_blocks_per_seq).bytes;
  TPSERVE_ASSIGN_OR_RETURN(stager->host_, PinnedBuffer::Create(bytes));
  TPSERVE_ASSIGN_OR_RETURN(stager->device_, DeviceBuffer::Create(bytes));
  return stager;
}

absl::StatusOr<CudaStepMetadata> CudaStepMetadataStager::Stage(const StepBatch& batch,
                                                                cudaStream_t stream) {
  // No padding: every token is real (a prefill has more tokens than sequences).
  return Send(batch, PlanStepMetadata(batch), static_cast<int>(batch.token_ids.size()), stream);
}

absl::StatusOr<CudaStepMetadata> CudaStepMetadataStager::StageDecode(const StepBatch& batch,
                                                                      int padded_seqs,
                                                                      int table_width,
                                                                      cudaStream_t stream) {
  for (const SequenceStep& s : batch.seqs) {
    if (s.num_new_tokens != 1 || s.all_logits ||
        (int64_t{s.context_len} + block_size_ - 1) / block_size_ > table_width) {
      return absl::InvalidArgumentError("StageDecode takes decode steps within the table width");
    }
  }
  if (static_cast<int>(batch.seqs.size()) > padded_seqs) {
    return absl::InvalidArgumentError("StageDecode: more sequences than the padded size");
  }
  return Send(PadDecodeBatch(batch, padded_seqs), PlanPaddedDecode(padded_seqs, table_width),
              static_cast<int>(batch.seqs.size()), stream);
}

absl::StatusOr<CudaStepMetadata> CudaStepMetadataStager::Send(const StepBatch& batch,
                                                               const StepMetadataLayout& layout,
                                                               int real_tokens,
                                                               cudaStream_t stream) {
  if (layout.num_tokens > max_tokens_ || layout.num_seqs > max_seqs_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a step of ", layout.num_tokens, " tokens in ", layout.num_seqs,
        " sequences exceeds the CUDA model's limits (max_batch_tokens ", max_tokens_,
        ", max_sequences ", max_seqs_, ")"));
  }
  if (layout.bytes > host_.bytes()) {
    return absl::InvalidArgumentError("a block table is longer than max_context allows");
  }
  PackStepMetadata(batch, block_size_, layout, host_.as<uint8_t>(), rope_rows_);
  MarkPaddingSlots(real_tokens, layout, host_.as<uint8_t>());
  TPSERVE_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(device_.data(), host_.data(), layout.bytes, cudaMemcpyHostToDevice, stream));
  const uint8_t* base = device_.as<uint8_t>();
  auto i32 = [base](size_t offset) { return reinterpret_cast<const int32_t*>(base + offset); };
  CudaStepMetadata m;
  m.token_ids = i32(layout.token_ids);
  m.positions = i32(layout.positions);
  m.slots = reinterpret_cast<const int64_t*>(base + layout.slots);
  m.logit_rows = i32(layout.logit_rows);
  m.num_tokens = layout.num_tokens;
  m.num_logit_rows = layout.num_logit_rows;
  AttentionMetadata& a = m.attention;
  a.query_start = i32(layout.query_start);
  a.context_lens = i32(layout.context_lens);
  a.block_tables = i32(layout.block_tables);
  a.num_seqs = static_cast<int>(layout.num_seqs);
  a.num_tokens = static_cast<int>(layout.num_tokens);
  a.max_blocks_per_seq = static_cast<int>(layout.table_width);
  for (const SequenceStep& s : batch.seqs) {
    a.max_query_len = std::max(a.max_query_len, s.num_new_tokens);
    a.max_context_len = std::max(a.max_context_len, s.context_len);
  }
  return m;
}

}  // namespace tpserve
