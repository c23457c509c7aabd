// SafetensorsFile: one memory-mapped .safetensors file, validated as the reference
// implementation (huggingface/safetensors) validates it.
//
// The format: an 8-byte little-endian header length N, N bytes of UTF-8 JSON, then the
// data buffer. ParseSafetensorsHeader checks a byte range without touching the file
// system; SafetensorsFile::Open maps a file (MAP_PRIVATE, PROT_READ) and runs the same
// checks. The mapping lives as long as the SafetensorsFile; after Open it is immutable
// and safe to read from any thread. Used by Checkpoint (checkpoint.h).
#ifndef TPSERVE_WORKER_LOADER_SAFETENSORS_H_
#define TPSERVE_WORKER_LOADER_SAFETENSORS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "worker/dtype.h"
#include "worker/tensor.h"

namespace tpserve {

// One tensor inside a mapped file (a SafetensorsFile or a Checkpoint). `data` points into the mapping.
struct TensorView {
  std::string name;
  std::string file;  // the path of the .safetensors file that holds it
  DType dtype = DType::kF32;
  Shape shape;
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
};

// The reference's MAX_HEADER_SIZE.
inline constexpr uint64_t kMaxSafetensorsHeaderSize = 100'000'000;

// One header entry; offsets are relative to the start of the data buffer.
struct SafetensorsEntryInfo {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

struct SafetensorsHeader {
  uint64_t header_size = 0;                    // N
  std::vector<SafetensorsEntryInfo> entries;   // sorted by data offsets
  std::map<std::string, std::string> metadata;  // "__metadata__", empty when absent
};

// Validates `file_bytes` (a whole file). Errors start with `file` and name the tensor
// (where there is one) and the rule broken.
absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(absl::Span<const uint8_t> file_bytes,
                                                         const std::string& file);

// Copies `view` into an fp32 Tensor after checking its shape against `expected_shape`
// (the error names the tensor, its file and both shapes). F32, BF16 and F16 convert;
// any other dtype is InvalidArgument naming the tensor and the dtype.
absl::StatusOr<Tensor> TensorViewToFloat(const TensorView& view, const Shape& expected_shape);
// The same into *out, reusing its storage (Tensor::Resize); *out is unspecified on error.
absl::Status TensorViewToFloatInto(const TensorView& view, const Shape& expected_shape,
                                   Tensor* out);

// `view` as a WeightView after the same shape and dtype checks: the bf16 mode's layers
// convert (and check) only the slice they keep, straight from the mapping.
absl::StatusOr<WeightView> TensorViewToWeight(const TensorView& view, const Shape& expected_shape);

// Drops the mapped pages under `view` from this process's resident set (madvise
// MADV_DONTNEED on the read-only private mapping): a later read faults them back in
// from the page cache, so this is only about memory. Loading calls it after each tensor,
// so that a model's load never holds the mapped checkpoint and the weights at once.
void ReleaseTensorPages(const TensorView& view);

class SafetensorsFile {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Every tensor, sorted by name; `data` points into the mapping.
  const std::vector<TensorView>& tensors() const { return tensors_; }
  // nullptr when absent.
  const TensorView* Find(absl::string_view name) const;

 private:
  SafetensorsFile() = default;

  std::string path_;
  void* mapping_ = nullptr;
  size_t mapping_size_ = 0;
  std::map<std::string, std::string> metadata_;
  std::vector<TensorView> tensors_;
};

}  // namespace tpserve

#endif  // TPSERVE_WORKER_LOADER_SAFETENSORS_H_
