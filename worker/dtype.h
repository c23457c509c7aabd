// Element types that tpserve reads from checkpoints, and their conversion to fp32.
// Pure functions; safe from any thread.
#ifndef TPSERVE_WORKER_DTYPE_H_
#define TPSERVE_WORKER_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tpserve {

// The safetensors dtype names. Only kF32, kBF16 and kF16 can hold model weights;
// the rest are known so that a file using them parses and is rejected by name.
enum class DType {
  kBool, kU8, kI8, kF8E5M2, kF8E4M3, kI16, kU16, kF16, kBF16,
  kI32, kU32, kF32, kF64, kI64, kU64,
};

// "BF16" -> kBF16. Unknown names are InvalidArgument.
absl::StatusOr<DType> DTypeFromName(absl::string_view name);
// kBF16 -> "BF16".
const char* DTypeName(DType dtype);
size_t DTypeSize(DType dtype);
// True for the dtypes that weights may use (F32, BF16, F16).
bool IsFloatWeightType(DType dtype);

inline float Bf16ToFloat(uint16_t v) {
  uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// IEEE half -> float, exact for every value including subnormals, inf and NaN.
float F16ToFloat(uint16_t v);

// Round-to-nearest-even float -> bf16 (NaN stays NaN).
inline uint16_t FloatToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  if (f != f) return static_cast<uint16_t>((bits >> 16) | 0x40);  // NaN: keep it quiet
  const uint32_t rounding = 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

// dst[i] = FloatToBf16(src[i]) for i < count, eight lanes at a time.
void FloatsToBf16(const float* src, size_t count, uint16_t* dst);
// dst[i] = Bf16ToFloat(src[i]) for i < count (exact), likewise.
void Bf16ToFloats(const uint16_t* src, size_t count, float* dst);

// The index of the first NaN or ±Inf among `count` bf16 values, or -1 when all are finite.
int64_t FirstNonFiniteBf16(const uint16_t* values, int64_t count);

// Converts `count` elements of `dtype` at `src` (unaligned is fine) into `dst`, checking
// in the same pass that every value is finite: a weight that is NaN or ±Inf would make
// every logit non-finite. InvalidArgument unless IsFloatWeightType(dtype), or naming the
// index (from `src`) and value of the first non-finite element.
absl::Status ConvertToFloat(DType dtype, const void* src, size_t count, float* dst);

}  // namespace tpserve

#endif  // TPSERVE_WORKER_DTYPE_H_
