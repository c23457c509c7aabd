#include "worker/kernels/cpu/pack_weight.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "worker/kernels/cpu/bf16_gemm.h"
#include "worker/kernels/cpu/int8_gemm.h"

namespace tpserve {
namespace {

template <typename Weight>
absl::StatusOr<std::unique_ptr<PackedWeight>> Boxed(absl::StatusOr<Weight> w) {
  if (!w.ok()) return w.status();
  return std::unique_ptr<PackedWeight>(std::make_unique<Weight>(*std::move(w)));
}

absl::Status ExpectMatrix(const Shape& shape) {
  if (shape.size() == 2) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("packing a weight: expected [n_out, k], got ", ShapeToString(shape)));
}

}  // namespace

const char* WeightFormatName(WeightFormat format) {
  return format == WeightFormat::kInt8 ? "int8" : "bf16";
}

std::optional<WeightFormat> PackedFormat(const PackedWeight* packed) {
  if (packed == nullptr) return std::nullopt;
  return packed->format();
}

absl::Status CheckRepack(WeightFormat have, WeightFormat want, absl::string_view what) {
  if (have == want) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(what, ": the weight is packed as ",
                                                    WeightFormatName(have), " already, not ",
                                                    WeightFormatName(want)));
}

absl::StatusOr<std::unique_ptr<PackedWeight>> PackBf16Rows(const uint16_t* data, int64_t n_out,
                                                           int64_t k, WeightFormat format) {
  return format == WeightFormat::kInt8 ? Boxed(Int8Weight::QuantizeBf16(data, n_out, k))
                                       : Boxed(PackedBf16Weight::FromBf16(data, n_out, k));
}

absl::StatusOr<std::unique_ptr<PackedWeight>> PackBf16RowsFrom(
    int64_t n_out, int64_t k, WeightFormat format, Int8Weight::Bf16RowSource source) {
  if (format == WeightFormat::kInt8) return Boxed(Int8Weight::QuantizeBf16Rows(n_out, k, source));
  if (n_out <= 0 || k <= 0) return PackBf16Rows(nullptr, n_out, k, format);  // its error
  Bf16Tensor staged({n_out, k});
  const int64_t chunk_rows =
      std::clamp<int64_t>(Int8Weight::kSourceChunkBytes / (2 * k), 1, n_out);
  for (int64_t row0 = 0; row0 < n_out; row0 += chunk_rows) {
    TPSERVE_RETURN_IF_ERROR(source(row0, std::min(chunk_rows, n_out - row0), staged.row(row0)));
  }
  return PackAndFree(staged, format);
}

absl::StatusOr<std::unique_ptr<PackedWeight>> FinishInt8(
    std::optional<Int8Weight::Builder>& builder, WeightFormat format, absl::string_view what) {
  TPSERVE_RETURN_IF_ERROR(CheckRepack(WeightFormat::kInt8, format, what));
  absl::StatusOr<std::unique_ptr<PackedWeight>> packed = Boxed(builder->Finish());
  if (packed.ok()) builder.reset();
  return packed;
}

absl::StatusOr<std::unique_ptr<PackedWeight>> PackFloatRows(const float* data, int64_t n_out,
                                                            int64_t k, WeightFormat format) {
  return format == WeightFormat::kInt8 ? Boxed(Int8Weight::QuantizeFloat(data, n_out, k))
                                       : Boxed(PackedBf16Weight::FromFloat(data, n_out, k));
}

absl::StatusOr<std::unique_ptr<PackedWeight>> PackAndFree(Tensor& weight, WeightFormat format) {
  if (absl::Status s = ExpectMatrix(weight.shape()); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<PackedWeight>> packed =
      PackFloatRows(weight.data(), weight.dim(0), weight.dim(1), format);
  if (packed.ok()) weight = Tensor();
  return packed;
}

absl::StatusOr<std::unique_ptr<PackedWeight>> PackAndFree(Bf16Tensor& weight,
                                                          WeightFormat format) {
  if (absl::Status s = ExpectMatrix(weight.shape()); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<PackedWeight>> packed =
      PackBf16Rows(weight.data(), weight.dim(0), weight.dim(1), format);
  if (packed.ok()) weight = Bf16Tensor();
  return packed;
}

}  // namespace tpserve
