#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/parallel_for.h"
#include "base/status_macros.h"
#include "worker/kernels/cpu/gemm.h"
#include "worker/layers/linear.h"

namespace tpserve {

RowParallelLinear::RowParallelLinear(CommGroup* comm, int64_t input_size, int64_t output_size,
                                     bool bias, bool input_is_parallel, bool skip_bias_add,
                                     bool reduce_results)
    : comm_(comm),
      input_size_(input_size),
      output_size_(output_size),
      has_bias_(bias),
      input_is_parallel_(input_is_parallel),
      skip_bias_add_(skip_bias_add),
      reduce_results_(reduce_results),
      weight_({output_size, input_size / comm->size()}),
      bias_(bias ? Tensor({output_size}) : Tensor()) {}

absl::StatusOr<std::unique_ptr<RowParallelLinear>> RowParallelLinear::Create(
    CommGroup* comm, int64_t input_size, int64_t output_size, bool bias, bool input_is_parallel,
    bool skip_bias_add, bool reduce_results) {
  if (input_size <= 0 || output_size <= 0 || input_size % comm->size() != 0) {
    return absl::InvalidArgumentError(absl::StrCat("RowParallelLinear: input_size=", input_size,
                                                   " must be positive and divisible by tp=",
                                                   comm->size()));
  }
  if (!reduce_results && bias && !skip_bias_add) {
    return absl::InvalidArgumentError(
        "RowParallelLinear: reduce_results=false with a bias needs skip_bias_add, or every "
        "rank would add the bias to its partial sum");
  }
  return std::unique_ptr<RowParallelLinear>(new RowParallelLinear(
      comm, input_size, output_size, bias, input_is_parallel, skip_bias_add, reduce_results));
}

absl::StatusOr<LinearOutput> RowParallelLinear::Forward(const Tensor& x) const {
  const int64_t in_local = input_size_ / comm_->size(), out = output_size_;
  const int64_t expected_in = input_is_parallel_ ? in_local : input_size_;
  if (x.rank() != 2 || x.dim(1) != expected_in) {
    return absl::InvalidArgumentError(absl::StrCat("RowParallelLinear input: expected [n, ",
                                                   expected_in, "], got ",
                                                   ShapeToString(x.shape())));
  }
  if (!staged_.empty() || int8_.has_value()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "RowParallelLinear: the weight is loaded in ", int8_.has_value() ? "int8" : "bf16",
        " but not packed (PackWeight)"));
  }
  const int64_t n = x.dim(0);
  Tensor x_local;  // [n, in/T]
  const Tensor* input = &x;
  if (!input_is_parallel_) {
    x_local = Tensor({n, in_local});
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(x_local.row(i), x.row(i) + comm_->rank() * in_local, in_local * sizeof(float));
    }
    input = &x_local;
  }
  Tensor y;  // [n, out], this rank's partial sum
  if (packed_ != nullptr) {
    y = Tensor::Uninitialized({n, out});  // the packed kernels write every element
    TPSERVE_RETURN_IF_ERROR(packed_->MatMul(input->data(), n, y.data(), /*accumulate=*/false));
  } else {
    y = Tensor({n, out});
    MatMulTransB(input->data(), weight_.data(), n, in_local, out, y.data());
  }
  LinearOutput result;
  // The bias joins rank 0's partial sum only, so the all-reduce adds it exactly once.
  const bool add_bias = has_bias_ && !skip_bias_add_ && comm_->rank() == 0;
  if (add_bias) {
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < out; ++j) y.row(i)[j] += bias_.data()[j];
    }
  }
  if (has_bias_ && skip_bias_add_) result.bias = &bias_;
  if (reduce_results_ && comm_->size() > 1) {
    TPSERVE_RETURN_IF_ERROR(comm_->AllReduceSum(y.span()));
  }
  result.output = std::move(y);
  return result;
}

absl::Status RowParallelLinear::PackWeight(WeightFormat format) {
  if (packed_ != nullptr) return CheckRepack(packed_->format(), format, "RowParallelLinear");
  if (int8_.has_value()) {
    TPSERVE_ASSIGN_OR_RETURN(packed_, FinishInt8(int8_, format, "RowParallelLinear"));
    return absl::OkStatus();
  }
  TPSERVE_ASSIGN_OR_RETURN(packed_, staged_.empty() ? PackAndFree(weight_, format)
                                                    : PackAndFree(staged_, format));
  return absl::OkStatus();
}

absl::Status RowParallelLinear::LoadAsInt8() {
  if (packed_ != nullptr || !staged_.empty() || int8_.has_value()) {
    return absl::FailedPreconditionError(
        "RowParallelLinear: LoadAsInt8 comes before the weight is loaded");
  }
  TPSERVE_ASSIGN_OR_RETURN(int8_, Int8Weight::Builder::Create(output_size_,
                                                              input_size_ / comm_->size()));
  weight_ = Tensor();  // never written: its pages were never faulted in
  return absl::OkStatus();
}

absl::Status RowParallelLinear::WeightLoaderBf16(const WeightView& loaded_weight) {
  if (packed_ != nullptr) {
    return absl::FailedPreconditionError("RowParallelLinear: the weight is packed already");
  }
  const int64_t in_local = input_size_ / comm_->size();
  if (loaded_weight.shape != Shape{output_size_, input_size_}) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RowParallelLinear weight: checkpoint tensor ", ShapeToString(loaded_weight.shape),
        ", expected ", ShapeToString({output_size_, input_size_})));
  }
  const int64_t col0 = comm_->rank() * in_local;
  if (int8_.has_value()) {  // this rank's columns of each row straight to int8
    return int8_->QuantizeRows(0, output_size_, [&](int64_t row0, int64_t rows, uint16_t* dst) {
      return CopyToBf16(loaded_weight, row0, rows, col0, in_local, dst, in_local);
    });
  }
  staged_ = Bf16Tensor({output_size_, in_local});
  weight_ = Tensor();  // never written: its pages were never faulted in
  return CopyToBf16(loaded_weight, 0, output_size_, col0, in_local, staged_.data(), in_local);
}

absl::Status RowParallelLinear::WeightLoader(Tensor& param, const Tensor& loaded_weight,
                                             const ShardId& shard_id) {
  if (!std::holds_alternative<std::monostate>(shard_id)) {
    return absl::InvalidArgumentError(absl::StrCat("RowParallelLinear takes no shard id, got ",
                                                   ShardIdToString(shard_id)));
  }
  if (&param == &bias_) {
    if (loaded_weight.shape() != bias_.shape()) {
      return absl::InvalidArgumentError(
          absl::StrCat("RowParallelLinear bias: checkpoint tensor ",
                       ShapeToString(loaded_weight.shape()), ", expected ",
                       ShapeToString(bias_.shape())));
    }
    std::memcpy(bias_.data(), loaded_weight.data(), bias_.numel() * sizeof(float));
    return absl::OkStatus();
  }
  if (packed_ != nullptr || !staged_.empty() || int8_.has_value()) {
    return absl::FailedPreconditionError("RowParallelLinear: the weight is packed already");
  }
  const int64_t out = weight_.dim(0), in_local = weight_.dim(1);
  if (&param != &weight_ || loaded_weight.shape() != Shape{out, input_size_}) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RowParallelLinear weight: checkpoint tensor ", ShapeToString(loaded_weight.shape()),
        ", expected ", ShapeToString({out, input_size_})));
  }
  const int64_t col0 = comm_->rank() * in_local;
  ParallelForBulk(out, in_local * sizeof(float), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      std::memcpy(weight_.row(i), loaded_weight.row(i) + col0, in_local * sizeof(float));
    }
  });
  return absl::OkStatus();
}

}  // namespace tpserve
