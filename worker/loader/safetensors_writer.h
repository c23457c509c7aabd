// Writes safetensors files and sharded-checkpoint indexes: for tests that need small
// files (valid or deliberately broken) and for tools that write synthetic checkpoints.
// Pure functions over their arguments; any thread (distinct paths).
#ifndef TPSERVE_WORKER_LOADER_SAFETENSORS_WRITER_H_
#define TPSERVE_WORKER_LOADER_SAFETENSORS_WRITER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "worker/dtype.h"
#include "worker/tensor.h"

namespace tpserve {

struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  std::string bytes;  // little-endian elements, row-major; NumElements × DTypeSize bytes
};

// Writes `tensors` in the given order, contiguous from offset 0, with the header padded
// by spaces to a multiple of 8 bytes (as the reference writer does). InvalidArgument if a
// tensor's byte count does not match its shape and dtype.
absl::Status WriteSafetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

// The raw framing with no checks: 8-byte little-endian length of `header_json`, the
// header, then `data`. For writing malformed files in tests.
std::string FrameSafetensors(absl::string_view header_json, absl::string_view data);

// Writes model.safetensors.index.json-style JSON: {"metadata": {}, "weight_map": ...}.
absl::Status WriteSafetensorsIndex(const std::string& path,
                                   const std::map<std::string, std::string>& weight_map);

// Writes `bytes` to `path`, replacing it.
absl::Status WriteBinaryFile(const std::string& path, absl::string_view bytes);

// Little-endian element bytes of `values` as F32, or as BF16 (round to nearest even).
std::string F32Bytes(const std::vector<float>& values);
std::string Bf16Bytes(const std::vector<float>& values);

}  // namespace tpserve

#endif  // TPSERVE_WORKER_LOADER_SAFETENSORS_WRITER_H_
