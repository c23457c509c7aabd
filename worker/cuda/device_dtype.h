// DeviceDType: the element type of a device tensor handed to code that is not templated
// on it (collectives, dispatch into typed kernels). fp32 is the reference and
// accumulation type, bf16 the production activation type. Header-only; any thread.
#ifndef TPSERVE_WORKER_CUDA_DEVICE_DTYPE_H_
#define TPSERVE_WORKER_CUDA_DEVICE_DTYPE_H_

#include <cstddef>

namespace tpserve {

enum class DeviceDType { kFloat32, kBFloat16 };

// Bytes per element.
constexpr size_t DeviceDTypeSize(DeviceDType dtype) {
  switch (dtype) {
    case DeviceDType::kFloat32:
      return 4;
    case DeviceDType::kBFloat16:
      return 2;
  }
  return 0;
}

// "fp32" or "bf16", for messages.
constexpr const char* DeviceDTypeName(DeviceDType dtype) {
  switch (dtype) {
    case DeviceDType::kFloat32:
      return "fp32";
    case DeviceDType::kBFloat16:
      return "bf16";
  }
  return "unknown";
}

}  // namespace tpserve

#endif  // TPSERVE_WORKER_CUDA_DEVICE_DTYPE_H_
