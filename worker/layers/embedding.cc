#include "worker/layers/embedding.h"

#include "worker/dtype.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/parallel_for.h"
#include "base/status_macros.h"
#include "worker/kernels/cpu/gemm.h"

namespace tpserve {
namespace {

// How many of this rank's `rows` rows of a [V, H] table are real (the rest are padding),
// after checking the checkpoint tensor's shape.
absl::StatusOr<int64_t> RealVocabRows(const Shape& loaded_shape, int64_t vocab_size,
                                      int64_t hidden, int rank, int64_t rows, const char* what) {
  if (loaded_shape != Shape{vocab_size, hidden}) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": checkpoint tensor ",
                                                   ShapeToString(loaded_shape), ", expected ",
                                                   ShapeToString({vocab_size, hidden})));
  }
  return std::max<int64_t>(0, std::min(rows, vocab_size - rank * rows));
}

// Copies this rank's real rows of the full [V, H] `loaded` into `param` [Vp/T, H].
absl::Status LoadVocabShard(Tensor& param, const Tensor& loaded, int64_t vocab_size, int rank,
                            const char* what) {
  const int64_t rows = param.dim(0), hidden = param.dim(1);
  TPSERVE_ASSIGN_OR_RETURN(const int64_t real,
                           RealVocabRows(loaded.shape(), vocab_size, hidden, rank, rows, what));
  if (real > 0) ParallelCopy(param.data(), loaded.row(rank * rows), real * hidden * sizeof(float));
  std::fill(param.data() + real * hidden, param.data() + param.numel(), 0.0f);  // padding rows
  return absl::OkStatus();
}

// CopyToBf16 of whole rows [row0, row0 + rows) of `loaded` into dst ([rows, cols]),
// kCopyChunkBytes of the checkpoint at a time, each chunk's mapped pages leaving the
// resident set once read (ReleaseMappedRows): a table's whole mapping is never held beside
// its copy.
constexpr int64_t kCopyChunkBytes = int64_t{4} << 20;
absl::Status CopyRowsReleasing(const WeightView& loaded, int64_t row0, int64_t rows,
                               uint16_t* dst) {
  const int64_t cols = loaded.dim(1);
  const auto row_bytes = static_cast<int64_t>(cols * DTypeSize(loaded.dtype));
  const int64_t chunk = std::max<int64_t>(1, kCopyChunkBytes / std::max<int64_t>(1, row_bytes));
  for (int64_t r = 0; r < rows; r += chunk) {
    const int64_t n = std::min(chunk, rows - r);
    TPSERVE_RETURN_IF_ERROR(CopyToBf16(loaded, row0 + r, n, 0, cols, dst + r * cols, cols));
    ReleaseMappedRows(loaded, row0 + r, n);
  }
  return absl::OkStatus();
}

// The same from a checkpoint view into a bf16 table [Vp/T, H], rounding as it copies.
absl::Status LoadVocabShardBf16(Bf16Tensor& param, const WeightView& loaded, int64_t vocab_size,
                                int rank, const char* what) {
  const int64_t rows = param.dim(0), hidden = param.dim(1);
  TPSERVE_ASSIGN_OR_RETURN(const int64_t real,
                           RealVocabRows(loaded.shape, vocab_size, hidden, rank, rows, what));
  std::fill(param.data() + real * hidden, param.data() + param.numel(), uint16_t{0});
  return CopyRowsReleasing(loaded, rank * rows, real, param.data());
}

}  // namespace

int64_t PaddedVocabSize(int64_t vocab_size, int tp) {
  const int64_t multiple = tp * kVocabPadRows;
  return (vocab_size + multiple - 1) / multiple * multiple;
}

VocabParallelEmbedding::VocabParallelEmbedding(int64_t num_embeddings, int64_t embedding_dim,
                                               CommGroup* comm,
                                               std::optional<int64_t> padding_idx)
    : comm_(comm),
      num_embeddings_(num_embeddings),
      embedding_dim_(embedding_dim),
      rows_(PaddedVocabSize(num_embeddings, comm->size()) / comm->size()),
      padding_idx_(padding_idx),
      weight_({rows_, embedding_dim}) {}

absl::Status VocabParallelEmbedding::WeightLoaderBf16(const WeightView& loaded_weight) {
  if (bf16_weight_.empty()) {
    bf16_weight_ = Bf16Tensor({rows_, embedding_dim_});
    weight_ = Tensor();  // never written: its pages were never faulted in
  }
  return LoadVocabShardBf16(bf16_weight_, loaded_weight, num_embeddings_, comm_->rank(),
                            "VocabParallelEmbedding");
}

absl::StatusOr<std::unique_ptr<VocabParallelEmbedding>> VocabParallelEmbedding::Create(
    int64_t num_embeddings, int64_t embedding_dim, CommGroup* comm,
    std::optional<int64_t> padding_idx) {
  if (num_embeddings <= 0 || embedding_dim <= 0) {
    return absl::InvalidArgumentError("VocabParallelEmbedding sizes must be positive");
  }
  if (padding_idx.has_value()) {
    if (*padding_idx < -num_embeddings || *padding_idx >= num_embeddings) {
      return absl::InvalidArgumentError(absl::StrCat(
          "padding_idx=", *padding_idx, " outside [-", num_embeddings, ", ", num_embeddings, ")"));
    }
    if (*padding_idx < 0) padding_idx = *padding_idx + num_embeddings;
  }
  return std::unique_ptr<VocabParallelEmbedding>(
      new VocabParallelEmbedding(num_embeddings, embedding_dim, comm, padding_idx));
}

absl::StatusOr<Tensor> VocabParallelEmbedding::Forward(absl::Span<const int32_t> ids) const {
  const int64_t rows = rows_, hidden = embedding_dim_;
  const int64_t start = comm_->rank() * rows;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= num_embeddings_) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", ids[i], " at position ", i,
                                                     " outside the vocab [0, ",
                                                     num_embeddings_, ")"));
    }
  }
  Tensor out({static_cast<int64_t>(ids.size()), hidden});  // [n, H]
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t local = ids[i] - start;  // ids of other ranks' slices stay zero here
    if (local >= 0 && local < rows) {
      if (weight_is_bf16()) {
        const uint16_t* row = bf16_weight_.row(local);
        float* dst = out.row(i);
        for (int64_t j = 0; j < hidden; ++j) dst[j] = Bf16ToFloat(row[j]);
      } else {
        std::memcpy(out.row(i), weight_.row(local), hidden * sizeof(float));
      }
    }
  }
  if (comm_->size() > 1) {
    TPSERVE_RETURN_IF_ERROR(comm_->AllReduceSum(out.span()));
  }
  return out;
}

absl::Status VocabParallelEmbedding::WeightLoader(Tensor& param, const Tensor& loaded_weight,
                                                  const ShardId& shard_id) {
  if (&param != &weight_ || !std::holds_alternative<std::monostate>(shard_id)) {
    return absl::InvalidArgumentError(
        "VocabParallelEmbedding has one parameter (weight) and takes no shard id");
  }
  if (weight_is_bf16()) {
    return absl::FailedPreconditionError("VocabParallelEmbedding: the table is bf16 already");
  }
  return LoadVocabShard(weight_, loaded_weight, num_embeddings_, comm_->rank(),
                        "VocabParallelEmbedding");
}

ParallelLMHead::ParallelLMHead(int64_t hidden_size, int64_t vocab_size, CommGroup* comm,
                               const VocabParallelEmbedding* tied)
    : comm_(comm),
      vocab_size_(vocab_size),
      tied_(tied),
      hidden_size_(hidden_size),
      own_weight_(tied ? Tensor()
                       : Tensor({PaddedVocabSize(vocab_size, comm->size()) / comm->size(),
                                 hidden_size})) {}

absl::StatusOr<std::unique_ptr<ParallelLMHead>> ParallelLMHead::Create(
    int64_t hidden_size, int64_t vocab_size, CommGroup* comm, const VocabParallelEmbedding* tied) {
  if (hidden_size <= 0 || vocab_size <= 0) {
    return absl::InvalidArgumentError("ParallelLMHead sizes must be positive");
  }
  if (tied != nullptr && (tied->num_embeddings() != vocab_size ||
                          tied->embedding_dim() != hidden_size)) {
    return absl::InvalidArgumentError("tied LM head must match the embedding's [V, H]");
  }
  return std::unique_ptr<ParallelLMHead>(new ParallelLMHead(hidden_size, vocab_size, comm, tied));
}

absl::Status ParallelLMHead::PackWeight(WeightFormat format) {
  if (packed_ != nullptr) return CheckRepack(packed_->format(), format, "lm_head");
  if (tied_ != nullptr && tied_->weight_is_bf16()) {
    const Bf16Tensor& w = tied_->bf16_weight();  // [Vp/T, H], the embedding's
    TPSERVE_ASSIGN_OR_RETURN(packed_, PackBf16Rows(w.data(), w.dim(0), w.dim(1), format));
  } else if (tied_ != nullptr) {
    const Tensor& w = tied_->weight();  // [Vp/T, H], the embedding's
    TPSERVE_ASSIGN_OR_RETURN(packed_, PackFloatRows(w.data(), w.dim(0), w.dim(1), format));
  } else {
    TPSERVE_ASSIGN_OR_RETURN(packed_, PackAndFree(own_weight_, format));
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> ParallelLMHead::Forward(const Tensor& x) const {
  if (x.rank() != 2 || x.dim(1) != hidden_size_) {
    return absl::InvalidArgumentError(absl::StrCat("LM head input: expected [n, ", hidden_size_,
                                                   "], got ", ShapeToString(x.shape())));
  }
  const int64_t n = x.dim(0);
  if (packed_ == nullptr && shard().empty()) {
    return absl::FailedPreconditionError(
        "ParallelLMHead: the weight is in bf16 but not packed (call PackWeight)");
  }
  const int64_t rows = packed_ != nullptr ? packed_->n_out() : shard().dim(0);
  // [n, Vp/T], written whole by either product.
  Tensor local = Tensor::Uninitialized({n, rows});
  if (packed_ != nullptr) {
    TPSERVE_RETURN_IF_ERROR(packed_->MatMul(x.data(), n, local.data(), /*accumulate=*/false));
  } else {
    const Tensor& w = shard();  // [Vp/T, H]
    MatMulTransB(x.data(), w.data(), n, hidden_size_, rows, local.data());
  }
  TPSERVE_ASSIGN_OR_RETURN(Tensor padded, AllGatherLastDim(*comm_, local));  // [n, Vp]
  const int64_t vp = padded.dim(1);
  if (vp == vocab_size_) return padded;
  Tensor logits = Tensor::Uninitialized({n, vocab_size_});  // [n, V]: padding dropped
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(logits.row(i), padded.data() + i * vp, vocab_size_ * sizeof(float));
  }
  return logits;
}

absl::Status ParallelLMHead::WeightLoader(Tensor& param, const Tensor& loaded_weight,
                                          const ShardId& shard_id) {
  if (tied_ != nullptr || packed_ != nullptr || &param != &own_weight_ ||
      !std::holds_alternative<std::monostate>(shard_id)) {
    return absl::InvalidArgumentError(
        "ParallelLMHead loads only its own weight (none when tied), with no shard id");
  }
  return LoadVocabShard(own_weight_, loaded_weight, vocab_size_, comm_->rank(), "lm_head");
}

absl::Status ParallelLMHead::WeightLoaderPacked(const WeightView& loaded_weight,
                                                WeightFormat format) {
  if (tied_ != nullptr || packed_ != nullptr) {
    return absl::InvalidArgumentError(
        "ParallelLMHead loads only its own weight (none when tied), before packing");
  }
  const int64_t rows = PaddedVocabSize(vocab_size_, comm_->size()) / comm_->size();
  const int64_t first = comm_->rank() * rows;  // this rank's first vocab row
  TPSERVE_ASSIGN_OR_RETURN(const int64_t real,
                           RealVocabRows(loaded_weight.shape, vocab_size_, hidden_size_,
                                         comm_->rank(), rows, "lm_head"));
  // Rows [row0, row0 + n) of the shard: the real ones copied, the padding ones zero.
  auto source = [&](int64_t row0, int64_t n, uint16_t* dst) -> absl::Status {
    const int64_t copied = std::clamp<int64_t>(real - row0, 0, n);
    std::fill(dst + copied * hidden_size_, dst + n * hidden_size_, uint16_t{0});
    return CopyRowsReleasing(loaded_weight, first + row0, copied, dst);
  };
  TPSERVE_ASSIGN_OR_RETURN(packed_, PackBf16RowsFrom(rows, hidden_size_, format, source));
  own_weight_ = Tensor();  // never written: its pages were never faulted in
  return absl::OkStatus();
}

}  // namespace tpserve
