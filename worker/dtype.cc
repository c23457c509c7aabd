#include "worker/dtype.h"

#include <immintrin.h>

#include <cmath>

#include "absl/strings/str_cat.h"

namespace tpserve {
namespace {

struct DTypeEntry {
  DType dtype;
  const char* name;
  size_t size;
};

constexpr DTypeEntry kDTypes[] = {
    {DType::kBool, "BOOL", 1},      {DType::kU8, "U8", 1},
    {DType::kI8, "I8", 1},          {DType::kF8E5M2, "F8_E5M2", 1},
    {DType::kF8E4M3, "F8_E4M3", 1}, {DType::kI16, "I16", 2},
    {DType::kU16, "U16", 2},        {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2},      {DType::kI32, "I32", 4},
    {DType::kU32, "U32", 4},        {DType::kF32, "F32", 4},
    {DType::kF64, "F64", 8},        {DType::kI64, "I64", 8},
    {DType::kU64, "U64", 8},
};

const DTypeEntry& Entry(DType dtype) {
  for (const DTypeEntry& e : kDTypes) {
    if (e.dtype == dtype) return e;
  }
  return kDTypes[0];  // unreachable: every enumerator is in the table
}

}  // namespace

absl::StatusOr<DType> DTypeFromName(absl::string_view name) {
  for (const DTypeEntry& e : kDTypes) {
    if (name == e.name) return e.dtype;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype \"", name, "\""));
}

const char* DTypeName(DType dtype) { return Entry(dtype).name; }

size_t DTypeSize(DType dtype) { return Entry(dtype).size; }

bool IsFloatWeightType(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16;
}

float F16ToFloat(uint16_t v) {
  const uint32_t sign = (v >> 15) & 1;
  const uint32_t exponent = (v >> 10) & 0x1f;
  const uint32_t mantissa = v & 0x3ff;
  float magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -24);
  } else if (exponent == 31) {
    magnitude = mantissa == 0 ? INFINITY : NAN;
  } else {
    magnitude = std::ldexp(static_cast<float>(mantissa | 0x400), static_cast<int>(exponent) - 25);
  }
  return sign ? -magnitude : magnitude;
}

void FloatsToBf16(const float* src, size_t count, uint16_t* dst) {
  // Eight at a time by hand (FloatToBf16 lane by lane: round to nearest even, a NaN kept
  // quiet): -O2's cost model leaves the plain loop scalar.
  typedef uint32_t U32x8 __attribute__((vector_size(32)));
  typedef int32_t I32x8 __attribute__((vector_size(32)));
  typedef uint16_t U16x8 __attribute__((vector_size(16)));
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    U32x8 bits;
    std::memcpy(&bits, src + i, sizeof(bits));
    const U32x8 rounded = (bits + (0x7fff + ((bits >> 16) & 1))) >> 16;
    const U32x8 quiet = (bits >> 16) | 0x40;
    // NaN: all-ones exponent, nonzero mantissa.
    const I32x8 nan = (bits & 0x7fffffff) > 0x7f800000;
    const U32x8 out = nan ? quiet : rounded;
    const U16x8 half = __builtin_convertvector(out, U16x8);
    std::memcpy(dst + i, &half, sizeof(half));
  }
  for (; i < count; ++i) dst[i] = FloatToBf16(src[i]);
}

void Bf16ToFloats(const uint16_t* __restrict src, size_t count, float* __restrict dst) {
  // Eight at a time by hand: -O2's cost model leaves the plain loop scalar.
  typedef uint16_t U16x8 __attribute__((vector_size(16)));
  typedef uint32_t U32x8 __attribute__((vector_size(32)));
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    U16x8 half;
    std::memcpy(&half, src + i, sizeof(half));
    const U32x8 wide = __builtin_convertvector(half, U32x8) << 16;
    std::memcpy(dst + i, &wide, sizeof(wide));
  }
  for (; i < count; ++i) dst[i] = Bf16ToFloat(src[i]);
}

namespace {

// A value is NaN or ±Inf exactly when its exponent bits are all ones; adding one unit of
// the exponent then carries into the top bit. That test rides the conversion loop as
// integer ops the compiler vectorises with it (an AND, an add, a shift, an OR per
// element), and the index is searched for only when it fired.
absl::Status NonFinite(const float* dst, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    if (!std::isfinite(dst[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("non-finite value ", dst[i], " at element ", i));
    }
  }
  return absl::InternalError("a non-finite value was flagged but not found");
}

}  // namespace

int64_t FirstNonFiniteBf16(const uint16_t* values, int64_t count) {
  // 64 values a step with AVX2 (the build's baseline; GCC 12 at -O2 leaves a loop with an
  // early exit scalar, at about a third of the speed), then the first of a flagged step's
  // values, or of the tail, found one at a time.
  const __m256i exponent = _mm256_set1_epi16(0x7f80);
  auto all_ones = [&](int64_t at) {  // lanes whose exponent bits are all set
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(values + at));
    return _mm256_cmpeq_epi16(_mm256_and_si256(v, exponent), exponent);
  };
  int64_t i = 0;
  for (; i + 64 <= count; i += 64) {
    const __m256i any = _mm256_or_si256(_mm256_or_si256(all_ones(i), all_ones(i + 16)),
                                        _mm256_or_si256(all_ones(i + 32), all_ones(i + 48)));
    if (!_mm256_testz_si256(any, any)) break;
  }
  for (; i < count; ++i) {
    if ((values[i] & 0x7f80) == 0x7f80) return i;
  }
  return -1;
}

absl::Status ConvertToFloat(DType dtype, const void* src, size_t count, float* dst) {
  const auto* bytes = static_cast<const uint8_t*>(src);
  uint32_t non_finite = 0;
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, src, count * sizeof(float));
      for (size_t i = 0; i < count; ++i) {
        uint32_t bits;
        std::memcpy(&bits, dst + i, 4);
        non_finite |= ((bits & 0x7f800000u) + 0x00800000u) >> 31;
      }
      break;
    case DType::kBF16:
      for (size_t i = 0; i < count; ++i) {
        uint16_t v;
        std::memcpy(&v, bytes + 2 * i, 2);
        non_finite |= ((v & 0x7f80u) + 0x0080u) >> 15;
        dst[i] = Bf16ToFloat(v);
      }
      break;
    case DType::kF16:
      for (size_t i = 0; i < count; ++i) {
        uint16_t v;
        std::memcpy(&v, bytes + 2 * i, 2);
        non_finite |= ((v & 0x7c00u) + 0x0400u) >> 15;
        dst[i] = F16ToFloat(v);
      }
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("dtype ", DTypeName(dtype), " cannot hold weights (F32, BF16, F16)"));
  }
  return non_finite != 0 ? NonFinite(dst, count) : absl::OkStatus();
}

}  // namespace tpserve
