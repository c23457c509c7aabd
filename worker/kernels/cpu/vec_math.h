// Eight-lane fp32 helpers for the CPU elementwise kernels (GCC/Clang vector extensions;
// the build targets x86-64-v3, so a V8 is one AVX register): load/store, a broadcast, a
// lane sum in a fixed order, e^x, elementwise sums and a masked row of e^x. Header-only
// so that each kernel's loop inlines them. GCC 12 at -O2 leaves a plain elementwise loop
// scalar (its cheapest vectoriser cost model will not add a runtime alias check or a
// remainder loop), so the hot loops are written with these.
#ifndef TPSERVE_WORKER_KERNELS_CPU_VEC_MATH_H_
#define TPSERVE_WORKER_KERNELS_CPU_VEC_MATH_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace tpserve {

typedef float V8 __attribute__((vector_size(32)));
typedef int32_t V8i __attribute__((vector_size(32)));

inline V8 Splat(float x) { return V8{x, x, x, x, x, x, x, x}; }

inline V8 Load8(const float* p) {
  V8 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

inline void Store8(float* p, V8 v) { std::memcpy(p, &v, sizeof(v)); }

// ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)): the same order on every call.
inline float LaneSum(V8 v) {
  return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
}

// e^x lane by lane, within a few ulp of std::exp (x up to 88): x = n·ln2 + r with
// |r| <= ln2/2, e^r by a degree-7 Taylor polynomial (truncation below 6e-9 relative on
// that interval), times 2^n through the exponent bits. At or below -87 (e^x < 1.7e-38)
// the result is 0, which keeps 2^n normal; above 88.3 it is e^88.3; NaN stays NaN.
inline V8 Exp(V8 x) {
  const V8 nan_lanes = x;
  const V8 lo = Splat(-87.0f), hi = Splat(88.3f);
  x = x < lo ? lo : x;
  x = x > hi ? hi : x;
  const V8 t = x * Splat(1.44269504088896341f);  // x / ln2
  V8i n = __builtin_convertvector(t + (t < Splat(0.0f) ? Splat(-0.5f) : Splat(0.5f)), V8i);
  const V8 nf = __builtin_convertvector(n, V8);
  V8 r = x - nf * Splat(0.693145751953125f);  // ln2 split in two for an exact first product
  r = r - nf * Splat(1.428606765330187e-06f);
  V8 poly = Splat(1.0f / 5040);
  poly = poly * r + Splat(1.0f / 720);
  poly = poly * r + Splat(1.0f / 120);
  poly = poly * r + Splat(1.0f / 24);
  poly = poly * r + Splat(1.0f / 6);
  poly = poly * r + Splat(0.5f);
  poly = poly * r + Splat(1.0f);
  poly = poly * r + Splat(1.0f);
  V8i bits;
  std::memcpy(&bits, &poly, sizeof(bits));
  bits += (n << 23);  // × 2^n: n >= -126 here, so the result stays normal
  V8 out;
  std::memcpy(&out, &bits, sizeof(out));
  out = x <= lo ? Splat(0.0f) : out;
  return nan_lanes != nan_lanes ? nan_lanes : out;
}

// dst[i] += src[i] for i < n: each element the scalar sum (dst and src may be the same
// array; they may not otherwise overlap).
inline void AddInto(float* dst, const float* src, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) Store8(dst + i, Load8(dst + i) + Load8(src + i));
  for (; i < n; ++i) dst[i] += src[i];
}

// dst[i] = a[i] + b[i] for i < n (dst may be a or b).
inline void SumInto(float* dst, const float* a, const float* b, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) Store8(dst + i, Load8(a + i) + Load8(b + i));
  for (; i < n; ++i) dst[i] = a[i] + b[i];
}

// A row of attention scores in place: columns [first, last] become e^(s − max), the rest
// +0; returns their sum, taken 8 lanes at a time from `first` and the lanes summed in
// order (the window's length alone fixes the order).
inline float ExpWindow(float* row, int64_t columns, int64_t first, int64_t last, float max) {
  std::fill(row, row + first, 0.0f);
  std::fill(row + last + 1, row + columns, 0.0f);
  const int64_t count = last - first + 1;
  float* w = row + first;
  const V8 m = Splat(max);
  V8 sum = Splat(0.0f);
  int64_t j = 0;
  for (; j + 8 <= count; j += 8) {
    const V8 e = Exp(Load8(w + j) - m);
    Store8(w + j, e);
    sum += e;
  }
  float total = 0.0f;
  for (int l = 0; l < 8; ++l) total += sum[l];
  for (; j < count; ++j) {  // the tail through the same Exp, a lane at a time
    const float e = Exp(Splat(w[j] - max))[0];
    w[j] = e;
    total += e;
  }
  return total;
}

}  // namespace tpserve

#endif  // TPSERVE_WORKER_KERNELS_CPU_VEC_MATH_H_
