// Test helpers for CUDA kernels, shared by every *_test.cc beside the kernels.
//
//  - TPSERVE_SKIP_WITHOUT_CUDA(): GTEST_SKIP when no device (the tests are tagged "gpu"
//    and run only on a device machine; on a CPU machine they build and skip).
//  - DeviceArray<T>: device copy of host floats converted to T (float or bf16).
//  - GuardedOutput<T>: an output with guard regions on both sides, poisoned with NaN
//    before the launch, so an out-of-bounds write breaks a guard and an unwritten
//    element stays NaN and fails the error check.
//  - RelativeError and KernelTolerance<T>: ‖got − want‖ / ‖want‖ against fp32 < 1e-5,
//    bf16 < 1e-2.
// Test-only; single-threaded.
#ifndef TPSERVE_WORKER_CUDA_CUDA_TEST_UTIL_H_
#define TPSERVE_WORKER_CUDA_CUDA_TEST_UTIL_H_

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "gtest/gtest.h"

namespace tpserve {

#define TPSERVE_SKIP_WITHOUT_CUDA()                                       \
  do {                                                                    \
    int _devices = 0;                                                     \
    if (cudaGetDeviceCount(&_devices) != cudaSuccess || _devices == 0) {  \
      GTEST_SKIP() << "no CUDA device";                                   \
    }                                                                     \
  } while (0)

#define TPSERVE_ASSERT_CUDA(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

template <typename T>
inline T FromFloat(float v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return __float2bfloat16(v);
  }
}

template <typename T>
inline float ToFloat(T v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return __bfloat162float(v);
  }
}

// Rounds each value to T's precision, so a CPU reference sees the kernel's inputs.
template <typename T>
std::vector<float> RoundTo(std::vector<float> v) {
  for (float& x : v) x = ToFloat(FromFloat<T>(x));
  return v;
}

// n values ~ N(0, stddev²), from `seed` (fresh inputs per check: never zeros).
inline std::vector<float> RandomVector(size_t n, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// A device array owned by the test. Freed on destruction.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) {
    if (cudaMalloc(reinterpret_cast<void**>(&data_), std::max<size_t>(n, 1) * sizeof(T)) !=
        cudaSuccess) {
      data_ = nullptr;
    }
  }
  explicit DeviceArray(const std::vector<float>& host) : DeviceArray(host.size()) {
    std::vector<T> converted(host.size());
    for (size_t i = 0; i < host.size(); ++i) converted[i] = FromFloat<T>(host[i]);
    if (data_ != nullptr && !host.empty()) {
      cudaMemcpy(data_, converted.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
    }
  }
  // Raw copy of host values of any trivially copyable type U with sizeof(U) == sizeof(T).
  template <typename U>
  static DeviceArray FromRaw(const std::vector<U>& host) {
    static_assert(sizeof(U) == sizeof(T));
    DeviceArray a(host.size());
    if (a.data_ != nullptr && !host.empty()) {
      cudaMemcpy(a.data_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
    }
    return a;
  }
  ~DeviceArray() {
    if (data_ != nullptr) cudaFree(data_);
  }
  DeviceArray(DeviceArray&& o) noexcept : data_(o.data_), n_(o.n_) { o.data_ = nullptr; }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() const { return data_; }
  size_t size() const { return n_; }
  std::vector<float> ToHost() const {
    std::vector<T> raw(n_);
    if (n_ > 0) cudaMemcpy(raw.data(), data_, n_ * sizeof(T), cudaMemcpyDeviceToHost);
    std::vector<float> out(n_);
    for (size_t i = 0; i < n_; ++i) out[i] = ToFloat(raw[i]);
    return out;
  }

 private:
  T* data_ = nullptr;
  size_t n_;
};

// An output of n elements between two guard regions, all poisoned with NaN bits.
template <typename T>
class GuardedOutput {
 public:
  static constexpr size_t kGuard = 256;  // elements on each side

  explicit GuardedOutput(size_t n) : n_(n), all_(n + 2 * kGuard) {
    std::vector<T> poison(n + 2 * kGuard);
    std::memset(static_cast<void*>(poison.data()), 0xFF, poison.size() * sizeof(T));  // NaN
    cudaMemcpy(all_.get(), poison.data(), poison.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  T* get() const { return all_.get() + kGuard; }
  // Sets the n elements (not the guards) to `host` converted to T, for in-place kernels.
  void Fill(const std::vector<float>& host) const {
    const DeviceArray<T> staged(host);
    cudaMemcpy(get(), staged.get(), std::min(host.size(), n_) * sizeof(T),
               cudaMemcpyDeviceToDevice);
  }
  // The n outputs; reports (as a test failure) any guard element that changed.
  std::vector<float> ToHostCheckingGuards() const {
    std::vector<T> raw(n_ + 2 * kGuard);
    cudaMemcpy(raw.data(), all_.get(), raw.size() * sizeof(T), cudaMemcpyDeviceToHost);
    int broken = 0;
    for (size_t i = 0; i < raw.size(); ++i) {
      if (i >= kGuard && i < kGuard + n_) continue;
      unsigned char bytes[sizeof(T)];
      std::memcpy(bytes, &raw[i], sizeof(T));
      for (unsigned char b : bytes) broken += b != 0xFF;
    }
    EXPECT_EQ(broken, 0) << "a kernel wrote outside its output of " << n_ << " elements";
    std::vector<float> out(n_);
    for (size_t i = 0; i < n_; ++i) out[i] = ToFloat(raw[kGuard + i]);
    return out;
  }

 private:
  size_t n_;
  DeviceArray<T> all_;
};

// ‖got − want‖₂ / ‖want‖₂; infinity if any value is NaN or the sizes differ.
inline double RelativeError(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return INFINITY;
  double err = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) || std::isnan(want[i])) return INFINITY;
    err += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    norm += double(want[i]) * want[i];
  }
  if (norm == 0) return err == 0 ? 0 : INFINITY;
  return std::sqrt(err / norm);
}

template <typename T>
constexpr double KernelTolerance() {
  return std::is_same_v<T, float> ? 1e-5 : 1e-2;
}

}  // namespace tpserve

#endif  // TPSERVE_WORKER_CUDA_CUDA_TEST_UTIL_H_
