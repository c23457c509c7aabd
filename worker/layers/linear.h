// Tensor-parallel linear layers with the seed API (shared/seeds/001_*.txt).
//
// T = comm.size(), r = comm.rank(). HF weights are [out, in] and y = x·Wᵀ + b.
//  - ColumnParallelLinear: weight [out/T, in] = rows [r·out/T, (r+1)·out/T).
//  - MergedColumnParallelLinear: several column-parallel outputs in one parameter.
//  - QKVParallelLinear: q, k, v heads split by rank, kv heads replicated when T > K.
//  - RowParallelLinear: weight [out, in/T] = columns [r·in/T, (r+1)·in/T); all-reduce.
// Each layer cuts its own slice of a full checkpoint tensor in WeightLoader and runs
// its own collective in Forward. After loading, PackWeight() may turn a layer's weight
// into bf16 packed for oneDNN or int8 per output channel (worker/kernels/cpu/
// pack_weight.h), freeing the fp32 copy: Forward then reads a half or a quarter of the
// bytes (activations and accumulation stay fp32) and weight() is empty. Layers are
// created once per rank and used by that rank's compute thread only; the CommGroup must
// outlive them.
#ifndef TPSERVE_WORKER_LAYERS_LINEAR_H_
#define TPSERVE_WORKER_LAYERS_LINEAR_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/comm/comm_group.h"
#include "worker/kernels/cpu/int8_gemm.h"
#include "worker/kernels/cpu/pack_weight.h"
#include "worker/kernels/cpu/packed_weight.h"
#include "worker/layers/shard_id.h"
#include "worker/tensor.h"

namespace tpserve {

// What Forward returns: the output, and the bias the caller must add itself when the
// layer was built with skip_bias_add (else null).
struct LinearOutput {
  Tensor output;
  const Tensor* bias = nullptr;
};

class ColumnParallelLinear {
 public:
  static absl::StatusOr<std::unique_ptr<ColumnParallelLinear>> Create(
      CommGroup* comm, int64_t input_size, int64_t output_size, bool bias = false,
      bool gather_output = false, bool skip_bias_add = false);
  virtual ~ColumnParallelLinear() = default;

  // x: [n, in] -> [n, out/T], or [n, out] when gather_output.
  absl::StatusOr<LinearOutput> Forward(const Tensor& x) const;

  // Copies this rank's slice of `loaded_weight` (the full checkpoint tensor, [out, in]
  // for the weight, [out] for the bias) into `param` (weight() or bias()). Subclasses
  // choose the rows through ShardRows.
  absl::Status WeightLoader(Tensor& param, const Tensor& loaded_weight,
                            const ShardId& shard_id = kNoShard);
  // The bf16 mode's loader of the weight (not the bias): the same rows of a bf16 view
  // go to a bf16 staging copy, and the fp32 weight is freed untouched, so no fp32 copy
  // of the weight ever exists; PackWeight then packs the staged copy.
  absl::Status WeightLoaderBf16(const WeightView& loaded_weight, const ShardId& shard_id = kNoShard);
  // Has WeightLoaderBf16 quantize the rows it is given straight to int8 per output
  // channel (Int8Weight::Builder) instead of staging them in bf16, so that no bf16 copy
  // of the weight is held; PackWeight(kInt8) then finishes the weight (FailedPrecondition
  // naming a row never loaded) and any other format is refused. Before any loading only.
  absl::Status LoadAsInt8();

  // The weight packed once in `format` (bf16 for oneDNN, or int8 per output channel),
  // from the staged bf16 copy if WeightLoaderBf16 ran, else from the fp32 weight; both
  // are freed. Idempotent for the same format; FailedPrecondition for another.
  absl::Status PackWeight(WeightFormat format);
  // The packed weight's format; nullopt while the weight is fp32.
  std::optional<WeightFormat> packed_format() const { return PackedFormat(packed_.get()); }

  Tensor& weight() { return weight_; }  // [out/T, in]; empty once packed
  Tensor* bias() { return has_bias_ ? &bias_ : nullptr; }  // [out/T]
  const Tensor& weight() const { return weight_; }
  const Tensor* bias() const { return has_bias_ ? &bias_ : nullptr; }
  int64_t input_size() const { return input_size_; }
  int64_t output_size_per_partition() const { return output_size_per_partition_; }
  bool gather_output() const { return gather_output_; }
  bool skip_bias_add() const { return skip_bias_add_; }

 protected:
  ColumnParallelLinear(CommGroup* comm, int64_t input_size, int64_t output_size_per_partition,
                       bool bias, bool gather_output, bool skip_bias_add);
  // Which rows of a checkpoint tensor with `loaded_rows` rows this rank copies, and
  // where they go in the parameter (weight or bias alike).
  struct RowCopy {
    int64_t dst_row = 0, src_row = 0, rows = 0;
    const char* what = "";  // names the layer (and shard) in errors
  };
  virtual absl::StatusOr<RowCopy> ShardRows(int64_t loaded_rows, const ShardId& shard_id) const;
  CommGroup& comm() const { return *comm_; }
  int tp_rank() const { return comm_->rank(); }
  int tp_size() const { return comm_->size(); }

 private:
  CommGroup* comm_;
  int64_t input_size_;
  int64_t output_size_per_partition_;
  bool has_bias_;
  bool gather_output_;
  bool skip_bias_add_;
  Tensor weight_;  // [out/T, in]
  Tensor bias_;    // [out/T]
  Bf16Tensor staged_;  // [out/T, in] in bf16, from WeightLoaderBf16 until packed
  std::optional<Int8Weight::Builder> int8_;  // [out/T, in], after LoadAsInt8 until packed
  std::unique_ptr<PackedWeight> packed_;  // [out/T, in], once packed
};

class MergedColumnParallelLinear : public ColumnParallelLinear {
 public:
  // Every output_sizes[i] must be divisible by T.
  static absl::StatusOr<std::unique_ptr<MergedColumnParallelLinear>> Create(
      CommGroup* comm, int64_t input_size, std::vector<int64_t> output_sizes, bool bias = true,
      bool gather_output = false, bool skip_bias_add = false);

  // WeightLoader's shard_id is an index i into output_sizes: source rows
  // [r·o_i/T, (r+1)·o_i/T) go to param rows starting at Σ_{j<i} o_j/T.

 protected:
  absl::StatusOr<RowCopy> ShardRows(int64_t loaded_rows, const ShardId& shard_id) const override;

 private:
  MergedColumnParallelLinear(CommGroup* comm, int64_t input_size,
                             std::vector<int64_t> output_sizes, bool bias, bool gather_output,
                             bool skip_bias_add);
  std::vector<int64_t> output_sizes_;
};

class QKVParallelLinear : public ColumnParallelLinear {
 public:
  // v_head_size defaults to head_size; total_num_kv_heads to total_num_heads.
  static absl::StatusOr<std::unique_ptr<QKVParallelLinear>> Create(
      CommGroup* comm, int64_t hidden_size, int64_t head_size, int64_t total_num_heads,
      std::optional<int64_t> total_num_kv_heads = std::nullopt, bool bias = true,
      bool skip_bias_add = false, std::optional<int64_t> v_head_size = std::nullopt);

  // WeightLoader's shard_id is "q", "k" or "v". q loads from source row r·n_q·d, k and
  // v from (r / rep)·n_kv·d, where rep ranks share each kv head when T > K.

  int64_t num_heads() const { return num_heads_; }        // n_q on this rank
  int64_t num_kv_heads() const { return num_kv_heads_; }  // n_kv on this rank
  int64_t head_size() const { return head_size_; }
  int64_t v_head_size() const { return v_head_size_; }
  int64_t num_kv_head_replicas() const { return replicas_; }

 protected:
  absl::StatusOr<RowCopy> ShardRows(int64_t loaded_rows, const ShardId& shard_id) const override;

 private:
  QKVParallelLinear(CommGroup* comm, int64_t hidden_size, int64_t head_size, int64_t num_heads,
                    int64_t num_kv_heads, int64_t replicas, int64_t v_head_size, bool bias,
                    bool skip_bias_add);
  int64_t head_size_, v_head_size_, num_heads_, num_kv_heads_, replicas_;
};

class RowParallelLinear {
 public:
  // input_size must be divisible by T. `!reduce_results && bias && !skip_bias_add` is
  // an error: each rank would add the bias to its partial sum.
  static absl::StatusOr<std::unique_ptr<RowParallelLinear>> Create(
      CommGroup* comm, int64_t input_size, int64_t output_size, bool bias = true,
      bool input_is_parallel = true, bool skip_bias_add = false, bool reduce_results = true);

  // x: [n, in/T] if input_is_parallel, else [n, in] (this rank takes its columns).
  // Returns [n, out], summed over ranks when reduce_results. The bias is added once.
  absl::StatusOr<LinearOutput> Forward(const Tensor& x) const;

  // Copies columns [r·in/T, (r+1)·in/T) of the [out, in] weight; the [out] bias whole.
  absl::Status WeightLoader(Tensor& param, const Tensor& loaded_weight,
                            const ShardId& shard_id = kNoShard);
  // The bf16 mode's loader of the weight: the same columns to a bf16 staging copy; the
  // fp32 weight is freed untouched (see ColumnParallelLinear::WeightLoaderBf16).
  absl::Status WeightLoaderBf16(const WeightView& loaded_weight);
  // As ColumnParallelLinear::LoadAsInt8.
  absl::Status LoadAsInt8();

  // The weight packed once in `format`, as ColumnParallelLinear::PackWeight.
  absl::Status PackWeight(WeightFormat format);
  std::optional<WeightFormat> packed_format() const { return PackedFormat(packed_.get()); }

  Tensor& weight() { return weight_; }  // [out, in/T]; empty once packed
  Tensor* bias() { return has_bias_ ? &bias_ : nullptr; }  // [out]
  const Tensor& weight() const { return weight_; }
  const Tensor* bias() const { return has_bias_ ? &bias_ : nullptr; }
  bool input_is_parallel() const { return input_is_parallel_; }
  bool skip_bias_add() const { return skip_bias_add_; }
  bool reduce_results() const { return reduce_results_; }

 private:
  RowParallelLinear(CommGroup* comm, int64_t input_size, int64_t output_size, bool bias,
                    bool input_is_parallel, bool skip_bias_add, bool reduce_results);
  CommGroup* comm_;
  int64_t input_size_;
  int64_t output_size_;
  bool has_bias_, input_is_parallel_, skip_bias_add_, reduce_results_;
  Tensor weight_;  // [out, in/T]
  Tensor bias_;    // [out]
  Bf16Tensor staged_;  // [out, in/T] in bf16, from WeightLoaderBf16 until packed
  std::optional<Int8Weight::Builder> int8_;  // [out, in/T], after LoadAsInt8 until packed
  std::unique_ptr<PackedWeight> packed_;  // [out, in/T], once packed
};

}  // namespace tpserve

#endif  // TPSERVE_WORKER_LAYERS_LINEAR_H_
