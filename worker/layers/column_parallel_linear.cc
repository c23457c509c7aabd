// ColumnParallelLinear, MergedColumnParallelLinear and QKVParallelLinear.
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/parallel_for.h"
#include "base/status_macros.h"
#include "worker/kernels/cpu/gemm.h"
#include "worker/layers/linear.h"

namespace tpserve {
namespace {

absl::Status CheckDivisible(int64_t value, int tp, const char* what) {
  if (value <= 0 || value % tp != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "=", value, " must be positive and divisible by tp=", tp));
  }
  return absl::OkStatus();
}

}  // namespace

ColumnParallelLinear::ColumnParallelLinear(CommGroup* comm, int64_t input_size,
                                           int64_t output_size_per_partition, bool bias,
                                           bool gather_output, bool skip_bias_add)
    : comm_(comm),
      input_size_(input_size),
      output_size_per_partition_(output_size_per_partition),
      has_bias_(bias),
      gather_output_(gather_output),
      skip_bias_add_(skip_bias_add),
      weight_({output_size_per_partition, input_size}),
      bias_(bias ? Tensor({output_size_per_partition}) : Tensor()) {}

absl::StatusOr<std::unique_ptr<ColumnParallelLinear>> ColumnParallelLinear::Create(
    CommGroup* comm, int64_t input_size, int64_t output_size, bool bias, bool gather_output,
    bool skip_bias_add) {
  TPSERVE_RETURN_IF_ERROR(CheckDivisible(output_size, comm->size(), "output_size"));
  return std::unique_ptr<ColumnParallelLinear>(new ColumnParallelLinear(
      comm, input_size, output_size / comm->size(), bias, gather_output, skip_bias_add));
}

absl::StatusOr<LinearOutput> ColumnParallelLinear::Forward(const Tensor& x) const {
  if (x.rank() != 2 || x.dim(1) != input_size_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ColumnParallelLinear input: expected [n, ", input_size_, "], got ",
        ShapeToString(x.shape())));
  }
  if (!staged_.empty() || int8_.has_value()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ColumnParallelLinear: the weight is loaded in ", int8_.has_value() ? "int8" : "bf16",
        " but not packed (PackWeight)"));
  }
  const int64_t n = x.dim(0), out = output_size_per_partition_;
  Tensor y;  // [n, out/T]
  if (packed_ != nullptr) {
    y = Tensor::Uninitialized({n, out});  // the packed kernels write every element
    TPSERVE_RETURN_IF_ERROR(packed_->MatMul(x.data(), n, y.data(), /*accumulate=*/false));
  } else {
    y = Tensor({n, out});
    MatMulTransB(x.data(), weight_.data(), n, input_size_, out, y.data());
  }
  LinearOutput result;
  if (has_bias_ && !skip_bias_add_) {
    for (int64_t i = 0; i < n; ++i) {
      float* row = y.row(i);
      for (int64_t j = 0; j < out; ++j) row[j] += bias_.data()[j];
    }
  } else if (has_bias_) {
    result.bias = &bias_;
  }
  if (gather_output_) {
    TPSERVE_ASSIGN_OR_RETURN(y, AllGatherLastDim(*comm_, y));  // [n, out]
  }
  result.output = std::move(y);
  return result;
}

absl::Status ColumnParallelLinear::PackWeight(WeightFormat format) {
  if (packed_ != nullptr) return CheckRepack(packed_->format(), format, "ColumnParallelLinear");
  if (int8_.has_value()) {
    TPSERVE_ASSIGN_OR_RETURN(packed_, FinishInt8(int8_, format, "ColumnParallelLinear"));
    return absl::OkStatus();
  }
  TPSERVE_ASSIGN_OR_RETURN(packed_, staged_.empty() ? PackAndFree(weight_, format)
                                                    : PackAndFree(staged_, format));
  return absl::OkStatus();
}

absl::Status ColumnParallelLinear::LoadAsInt8() {
  if (packed_ != nullptr || !staged_.empty() || int8_.has_value()) {
    return absl::FailedPreconditionError(
        "ColumnParallelLinear: LoadAsInt8 comes before the weight is loaded");
  }
  TPSERVE_ASSIGN_OR_RETURN(int8_, Int8Weight::Builder::Create(output_size_per_partition_,
                                                              input_size_));
  weight_ = Tensor();  // never written: its pages were never faulted in
  return absl::OkStatus();
}

absl::StatusOr<ColumnParallelLinear::RowCopy> ColumnParallelLinear::ShardRows(
    int64_t loaded_rows, const ShardId& shard_id) const {
  if (!std::holds_alternative<std::monostate>(shard_id)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ColumnParallelLinear takes no shard id, got ", ShardIdToString(shard_id)));
  }
  const int64_t rows = output_size_per_partition_;
  if (loaded_rows != rows * tp_size()) {
    return absl::InvalidArgumentError(absl::StrCat("ColumnParallelLinear: checkpoint tensor has ",
                                                   loaded_rows, " rows, expected ",
                                                   rows * tp_size()));
  }
  return RowCopy{0, tp_rank() * rows, rows, "ColumnParallelLinear"};
}

absl::Status ColumnParallelLinear::WeightLoader(Tensor& param, const Tensor& loaded_weight,
                                                const ShardId& shard_id) {
  if (&param == &weight_ && (packed_ != nullptr || !staged_.empty() || int8_.has_value())) {
    return absl::FailedPreconditionError(
        "ColumnParallelLinear: the weight is packed already");
  }
  if (loaded_weight.rank() == 0) {
    return absl::InvalidArgumentError("ColumnParallelLinear: empty checkpoint tensor");
  }
  TPSERVE_ASSIGN_OR_RETURN(const RowCopy copy, ShardRows(loaded_weight.dim(0), shard_id));
  const int64_t width = param.rank() == 1 ? 1 : param.dim(1);
  const int64_t loaded_width = loaded_weight.rank() == 1 ? 1 : loaded_weight.dim(1);
  if (loaded_weight.rank() != param.rank() || loaded_width != width) {
    return absl::InvalidArgumentError(absl::StrCat(
        copy.what, ": checkpoint tensor ", ShapeToString(loaded_weight.shape()),
        " does not match parameter ", ShapeToString(param.shape())));
  }
  if (copy.dst_row + copy.rows > param.dim(0)) {
    return absl::InvalidArgumentError(absl::StrCat(copy.what, ": rows do not fit parameter ",
                                                   ShapeToString(param.shape())));
  }
  ParallelCopy(param.data() + copy.dst_row * width, loaded_weight.data() + copy.src_row * width,
               copy.rows * width * sizeof(float));
  return absl::OkStatus();
}

absl::Status ColumnParallelLinear::WeightLoaderBf16(const WeightView& loaded_weight,
                                                    const ShardId& shard_id) {
  if (packed_ != nullptr) {
    return absl::FailedPreconditionError("ColumnParallelLinear: the weight is packed already");
  }
  if (loaded_weight.rank() != 2 || loaded_weight.dim(1) != input_size_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ColumnParallelLinear: checkpoint tensor ", ShapeToString(loaded_weight.shape),
        " should be [rows, ", input_size_, "]"));
  }
  TPSERVE_ASSIGN_OR_RETURN(const RowCopy copy, ShardRows(loaded_weight.dim(0), shard_id));
  if (int8_.has_value()) {  // the rows straight to int8, a chunk at a time
    return int8_->QuantizeRows(
        copy.dst_row, copy.rows, [&](int64_t row0, int64_t rows, uint16_t* dst) {
          return CopyToBf16(loaded_weight, copy.src_row + (row0 - copy.dst_row), rows, 0,
                            input_size_, dst, input_size_);
        });
  }
  if (staged_.empty()) {
    staged_ = Bf16Tensor({output_size_per_partition_, input_size_});
    weight_ = Tensor();  // never written: its pages were never faulted in
  }
  return CopyToBf16(loaded_weight, copy.src_row, copy.rows, 0, input_size_,
                    staged_.row(copy.dst_row), input_size_);
}

MergedColumnParallelLinear::MergedColumnParallelLinear(CommGroup* comm, int64_t input_size,
                                                       std::vector<int64_t> output_sizes,
                                                       bool bias, bool gather_output,
                                                       bool skip_bias_add)
    : ColumnParallelLinear(comm, input_size,
                           [&] {
                             int64_t total = 0;
                             for (int64_t o : output_sizes) total += o;
                             return total / comm->size();
                           }(),
                           bias, gather_output, skip_bias_add),
      output_sizes_(std::move(output_sizes)) {}

absl::StatusOr<std::unique_ptr<MergedColumnParallelLinear>> MergedColumnParallelLinear::Create(
    CommGroup* comm, int64_t input_size, std::vector<int64_t> output_sizes, bool bias,
    bool gather_output, bool skip_bias_add) {
  if (output_sizes.empty()) return absl::InvalidArgumentError("output_sizes is empty");
  for (int64_t o : output_sizes) {
    TPSERVE_RETURN_IF_ERROR(CheckDivisible(o, comm->size(), "output_sizes[i]"));
  }
  return std::unique_ptr<MergedColumnParallelLinear>(new MergedColumnParallelLinear(
      comm, input_size, std::move(output_sizes), bias, gather_output, skip_bias_add));
}

absl::StatusOr<ColumnParallelLinear::RowCopy> MergedColumnParallelLinear::ShardRows(
    int64_t loaded_rows, const ShardId& shard_id) const {
  if (!std::holds_alternative<int>(shard_id) || std::get<int>(shard_id) < 0 ||
      std::get<int>(shard_id) >= static_cast<int>(output_sizes_.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("MergedColumnParallelLinear needs a shard index in [0, ",
                     output_sizes_.size(), "), got ", ShardIdToString(shard_id)));
  }
  const int index = std::get<int>(shard_id);
  int64_t offset = 0;
  for (int j = 0; j < index; ++j) offset += output_sizes_[j] / tp_size();
  const int64_t rows = output_sizes_[index] / tp_size();
  if (loaded_rows != output_sizes_[index]) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MergedColumnParallelLinear shard ", index, ": checkpoint tensor has ", loaded_rows,
        " rows, expected ", output_sizes_[index]));
  }
  return RowCopy{offset, tp_rank() * rows, rows, "MergedColumnParallelLinear"};
}

QKVParallelLinear::QKVParallelLinear(CommGroup* comm, int64_t hidden_size, int64_t head_size,
                                     int64_t num_heads, int64_t num_kv_heads, int64_t replicas,
                                     int64_t v_head_size, bool bias, bool skip_bias_add)
    : ColumnParallelLinear(comm, hidden_size,
                           (num_heads + num_kv_heads) * head_size + num_kv_heads * v_head_size,
                           bias, /*gather_output=*/false, skip_bias_add),
      head_size_(head_size),
      v_head_size_(v_head_size),
      num_heads_(num_heads),
      num_kv_heads_(num_kv_heads),
      replicas_(replicas) {}

absl::StatusOr<std::unique_ptr<QKVParallelLinear>> QKVParallelLinear::Create(
    CommGroup* comm, int64_t hidden_size, int64_t head_size, int64_t total_num_heads,
    std::optional<int64_t> total_num_kv_heads, bool bias, bool skip_bias_add,
    std::optional<int64_t> v_head_size) {
  const int tp = comm->size();
  const int64_t kv = total_num_kv_heads.value_or(total_num_heads);
  if (head_size <= 0 || hidden_size <= 0 || kv <= 0) {
    return absl::InvalidArgumentError("QKVParallelLinear sizes must be positive");
  }
  TPSERVE_RETURN_IF_ERROR(CheckDivisible(total_num_heads, tp, "total_num_heads"));
  int64_t n_kv = 1, replicas = 1;
  if (tp >= kv) {
    if (tp % kv != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tp=", tp, " must be a multiple of total_num_kv_heads=", kv, " when it exceeds it"));
    }
    replicas = tp / kv;
  } else {
    TPSERVE_RETURN_IF_ERROR(CheckDivisible(kv, tp, "total_num_kv_heads"));
    n_kv = kv / tp;
  }
  return std::unique_ptr<QKVParallelLinear>(new QKVParallelLinear(
      comm, hidden_size, head_size, total_num_heads / tp, n_kv, replicas,
      v_head_size.value_or(head_size), bias, skip_bias_add));
}

absl::StatusOr<ColumnParallelLinear::RowCopy> QKVParallelLinear::ShardRows(
    int64_t loaded_rows, const ShardId& shard_id) const {
  const std::string* id = std::get_if<std::string>(&shard_id);
  if (id == nullptr || (*id != "q" && *id != "k" && *id != "v")) {
    return absl::InvalidArgumentError(
        absl::StrCat("QKVParallelLinear needs shard id \"q\", \"k\" or \"v\", got ",
                     ShardIdToString(shard_id)));
  }
  const int r = tp_rank();
  const int64_t q_rows = num_heads_ * head_size_, k_rows = num_kv_heads_ * head_size_;
  const int64_t v_rows = num_kv_heads_ * v_head_size_;
  const int64_t kv_index = r / replicas_;  // which kv-head group this rank holds
  const int64_t total_kv_heads = num_kv_heads_ * tp_size() / replicas_;
  const int64_t expected_rows = *id == "q"   ? num_heads_ * tp_size() * head_size_
                                : *id == "k" ? total_kv_heads * head_size_
                                             : total_kv_heads * v_head_size_;
  if (loaded_rows != expected_rows) {
    return absl::InvalidArgumentError(absl::StrCat("QKVParallelLinear ", *id,
                                                   ": checkpoint tensor has ", loaded_rows,
                                                   " rows, expected ", expected_rows));
  }
  if (*id == "q") return RowCopy{0, r * q_rows, q_rows, "QKVParallelLinear q"};
  if (*id == "k") return RowCopy{q_rows, kv_index * k_rows, k_rows, "QKVParallelLinear k"};
  return RowCopy{q_rows + k_rows, kv_index * v_rows, v_rows, "QKVParallelLinear v"};
}

}  // namespace tpserve
