// Vocabulary-parallel embedding and LM head (shared/seeds/000_*.txt), with padding.
//
// The seed requires V divisible by T. tpserve pads V up to Vp = PaddedVocabSize(V, T);
// rank r holds rows [r·Vp/T, (r+1)·Vp/T); rows ≥ V are zero and never surface: the
// embedding rejects ids ≥ V and the LM head strips the padded logits after gathering.
// Used by one rank's compute thread; the CommGroup must outlive the layer.
#ifndef TPSERVE_WORKER_LAYERS_EMBEDDING_H_
#define TPSERVE_WORKER_LAYERS_EMBEDDING_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/comm/comm_group.h"
#include "worker/kernels/cpu/pack_weight.h"
#include "worker/kernels/cpu/packed_weight.h"
#include "worker/layers/shard_id.h"
#include "worker/tensor.h"

namespace tpserve {

// Each rank's slice is a multiple of this many rows.
inline constexpr int64_t kVocabPadRows = 8;

// Smallest multiple of tp·kVocabPadRows that is ≥ vocab_size.
int64_t PaddedVocabSize(int64_t vocab_size, int tp);

class VocabParallelEmbedding {
 public:
  // padding_idx follows torch: negative counts from the end; it only marks a row.
  static absl::StatusOr<std::unique_ptr<VocabParallelEmbedding>> Create(
      int64_t num_embeddings, int64_t embedding_dim, CommGroup* comm,
      std::optional<int64_t> padding_idx = std::nullopt);

  // ids: [n], each in [0, V) -> [n, H] replicated on every rank (one all-reduce).
  absl::StatusOr<Tensor> Forward(absl::Span<const int32_t> ids) const;

  // Slices the full [V, H] checkpoint tensor into this rank's [Vp/T, H]; padded rows stay 0.
  absl::Status WeightLoader(Tensor& param, const Tensor& loaded_weight,
                            const ShardId& shard_id = kNoShard);

  // The bf16 mode's loader: this rank's rows of a checkpoint view straight into the
  // bf16 table (rounded to nearest even), at half the fp32 table's memory; the fp32
  // table is freed untouched. A lookup widens its rows (exact).
  absl::Status WeightLoaderBf16(const WeightView& loaded_weight);
  bool weight_is_bf16() const { return !bf16_weight_.empty(); }
  const Bf16Tensor& bf16_weight() const { return bf16_weight_; }  // [Vp/T, H] once bf16

  Tensor& weight() { return weight_; }  // [Vp/T, H]; empty once converted to bf16
  const Tensor& weight() const { return weight_; }
  int64_t num_embeddings() const { return num_embeddings_; }
  int64_t embedding_dim() const { return embedding_dim_; }
  std::optional<int64_t> padding_idx() const { return padding_idx_; }

 private:
  VocabParallelEmbedding(int64_t num_embeddings, int64_t embedding_dim, CommGroup* comm,
                         std::optional<int64_t> padding_idx);
  CommGroup* comm_;
  int64_t num_embeddings_;
  int64_t embedding_dim_;
  int64_t rows_;  // Vp/T
  std::optional<int64_t> padding_idx_;
  Tensor weight_;  // [Vp/T, H]
  Bf16Tensor bf16_weight_;  // [Vp/T, H] bf16 bits, once bf16
};

// LM head: ColumnParallelLinear(gather_output=True) over the same padded vocab split,
// returning only the V real logits. With tied embeddings it reads the embedding's shard.
class ParallelLMHead {
 public:
  // tied: the embedding whose weight to share (must outlive the head), or null.
  static absl::StatusOr<std::unique_ptr<ParallelLMHead>> Create(
      int64_t hidden_size, int64_t vocab_size, CommGroup* comm,
      const VocabParallelEmbedding* tied = nullptr);

  // x: [n, H] -> logits [n, V] on every rank.
  absl::StatusOr<Tensor> Forward(const Tensor& x) const;

  // Untied only: slices the [V, H] lm_head.weight into this rank's [Vp/T, H].
  absl::Status WeightLoader(Tensor& param, const Tensor& loaded_weight,
                            const ShardId& shard_id = kNoShard);
  // Untied only, the bf16 and int8 modes' loader: this rank's rows of a checkpoint view
  // (rounded to bf16) packed in `format` at once; the fp32 weight is freed untouched.
  // int8 is quantized as the rows are read (Int8Weight::QuantizeBf16Rows): no bf16 copy
  // of the whole head is ever held.
  absl::Status WeightLoaderPacked(const WeightView& loaded_weight, WeightFormat format);
  // The weight packed in `format` (bf16 for oneDNN, or int8 per vocab row): an untied
  // head's fp32 one, which is freed; a tied head packs a copy of the embedding's shard,
  // fp32 or bf16 (the embedding keeps its table for lookups). A head packed by
  // WeightLoaderPacked is left as it is.
  // Idempotent for the same format; FailedPrecondition for another.
  absl::Status PackWeight(WeightFormat format);
  std::optional<WeightFormat> packed_format() const { return PackedFormat(packed_.get()); }
  Tensor& weight() { return own_weight_; }  // [Vp/T, H]; empty when tied or packed
  // The weight the head multiplies by: the embedding's shard when tied. [Vp/T, H]
  const Tensor& shard() const { return tied_ != nullptr ? tied_->weight() : own_weight_; }
  int64_t vocab_size() const { return vocab_size_; }

 private:
  ParallelLMHead(int64_t hidden_size, int64_t vocab_size, CommGroup* comm,
                 const VocabParallelEmbedding* tied);
  CommGroup* comm_;
  int64_t vocab_size_;
  const VocabParallelEmbedding* tied_;
  int64_t hidden_size_;
  Tensor own_weight_;  // [Vp/T, H]
  std::unique_ptr<PackedWeight> packed_;  // [Vp/T, H], once packed
};

}  // namespace tpserve

#endif  // TPSERVE_WORKER_LAYERS_EMBEDDING_H_
