// Turning a linear layer's weight into the PackedWeight it computes with: bf16 packed for
// oneDNN (PackedBf16Weight) or int8 per output channel (Int8Weight). Called once per
// weight while a model loads, on the loading thread.
#ifndef TPSERVE_WORKER_KERNELS_CPU_PACK_WEIGHT_H_
#define TPSERVE_WORKER_KERNELS_CPU_PACK_WEIGHT_H_

#include <cstdint>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/kernels/cpu/int8_gemm.h"
#include "worker/kernels/cpu/packed_weight.h"
#include "worker/tensor.h"

namespace tpserve {

// "bf16" or "int8", for messages.
const char* WeightFormatName(WeightFormat format);
// The format of `packed`, or nullopt when there is none (the weight is still fp32).
std::optional<WeightFormat> PackedFormat(const PackedWeight* packed);
// OK when a weight packed as `have` is asked again for `want` (the same format); else
// FailedPrecondition naming `what` and both formats.
absl::Status CheckRepack(WeightFormat have, WeightFormat want, absl::string_view what);

// data: [n_out, k] bf16 bits, read once. InvalidArgument on a bad size or a non-finite
// weight.
absl::StatusOr<std::unique_ptr<PackedWeight>> PackBf16Rows(const uint16_t* data, int64_t n_out,
                                                           int64_t k, WeightFormat format);

// The same from the rows `source` writes (Int8Weight::Bf16RowSource), asked for in order
// a chunk of at most Int8Weight::kSourceChunkBytes at a time: int8 quantizes each chunk as
// it comes, never holding the whole bf16 weight; bf16 stages them all first (its packers
// take the whole matrix). A source's error is returned as it is.
absl::StatusOr<std::unique_ptr<PackedWeight>> PackBf16RowsFrom(
    int64_t n_out, int64_t k, WeightFormat format, Int8Weight::Bf16RowSource source);

// The weight a layer's `builder` quantized as it loaded, finished and boxed, for
// PackWeight(`format`): FailedPrecondition naming `what` for a format other than int8, or
// (from Finish) naming a row never loaded. The builder is reset once finished.
absl::StatusOr<std::unique_ptr<PackedWeight>> FinishInt8(
    std::optional<Int8Weight::Builder>& builder, WeightFormat format, absl::string_view what);

// data: [n_out, k] fp32, read once (int8: quantized from the fp32 values, not from a
// bf16 rounding of them).
absl::StatusOr<std::unique_ptr<PackedWeight>> PackFloatRows(const float* data, int64_t n_out,
                                                            int64_t k, WeightFormat format);

// A layer's fp32 weight tensor ([n_out, k]) packed (int8: quantized from the fp32
// values), then freed (`weight` is left empty).
absl::StatusOr<std::unique_ptr<PackedWeight>> PackAndFree(Tensor& weight, WeightFormat format);
// The same from a bf16 staging copy ([n_out, k]), freed (left empty) once packed.
absl::StatusOr<std::unique_ptr<PackedWeight>> PackAndFree(Bf16Tensor& weight,
                                                          WeightFormat format);

}  // namespace tpserve

#endif  // TPSERVE_WORKER_KERNELS_CPU_PACK_WEIGHT_H_
