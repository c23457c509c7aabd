#include "worker/loader/safetensors.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/json_fields.h"
#include "base/json_file.h"
#include "base/parallel_for.h"
#include "base/regular_file.h"
#include "base/status_macros.h"

namespace tpserve {
namespace {

using nlohmann::json;

constexpr uint64_t kLengthBytes = 8;

absl::Status FileError(const std::string& file, absl::string_view rule) {
  return absl::InvalidArgumentError(absl::StrCat(file, ": ", rule));
}

absl::Status TensorError(const std::string& file, absl::string_view tensor,
                         absl::string_view rule) {
  return absl::InvalidArgumentError(absl::StrCat(file, ": tensor \"", tensor, "\": ", rule));
}

// Strict UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF), as Rust's
// str::from_utf8 checks. Returns the offset of the first bad byte, or npos.
size_t FindInvalidUtf8(absl::Span<const uint8_t> s) {
  size_t i = 0;
  while (i < s.size()) {
    const uint8_t c = s[i];
    size_t len;
    uint8_t lo = 0x80, hi = 0xBF;  // bounds for the second byte
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    if (s.size() - i < len || s[i + 1] < lo || s[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return i;
    }
    i += len;
  }
  return std::string::npos;
}

// The 8-byte little-endian header length N, checked against the limit and the file.
absl::StatusOr<uint64_t> ReadHeaderLength(absl::Span<const uint8_t> bytes,
                                          const std::string& file) {
  if (bytes.size() < kLengthBytes) {
    return FileError(file, absl::StrCat("file is ", bytes.size(),
                                        " bytes, too short for the 8-byte header length"));
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];
  if (n > kMaxSafetensorsHeaderSize) {
    return FileError(file, absl::StrCat("header length ", n, " exceeds the limit of ",
                                        kMaxSafetensorsHeaderSize, " bytes"));
  }
  if (kLengthBytes + n > bytes.size()) {
    return FileError(file, absl::StrCat("header length ", n, " runs past the end of the file (",
                                        bytes.size(), " bytes); truncated?"));
  }
  return n;
}

absl::StatusOr<std::map<std::string, std::string>> ParseMetadata(const json& value,
                                                                 const std::string& file) {
  std::map<std::string, std::string> metadata;
  if (value.is_null()) return metadata;  // the reference reads it as an Option
  if (!value.is_object()) {
    return FileError(file, absl::StrCat("\"__metadata__\" must be an object of strings, got ",
                                        JsonTypeName(value)));
  }
  for (const auto& [key, v] : value.items()) {
    if (!v.is_string()) {
      return FileError(file, absl::StrCat("\"__metadata__\" entry \"", key,
                                          "\" must be a string, got ", JsonTypeName(v)));
    }
    metadata[key] = v.get<std::string>();
  }
  return metadata;
}

// Reads a JSON array of non-negative integers that fit `max`.
absl::StatusOr<std::vector<uint64_t>> ParseUnsignedArray(const json& value, uint64_t max,
                                                         const std::string& file,
                                                         const std::string& tensor,
                                                         absl::string_view key) {
  if (!value.is_array()) {
    return TensorError(file, tensor, absl::StrCat("\"", key, "\" must be an array, got ",
                                                  JsonTypeName(value)));
  }
  std::vector<uint64_t> out;
  for (const json& v : value) {
    if (!v.is_number_unsigned()) {  // an integer in [0, 2^64), not 4.0 or 1e30
      return TensorError(file, tensor,
                         absl::StrCat("\"", key, "\" must hold non-negative integers, got ",
                                      JsonTypeName(v), " ", v.dump()));
    }
    const uint64_t x = v.get<uint64_t>();
    if (x > max) {
      return TensorError(file, tensor,
                         absl::StrCat("\"", key, "\" value ", x, " exceeds ", max));
    }
    out.push_back(x);
  }
  return out;
}

absl::StatusOr<SafetensorsEntryInfo> ParseEntry(const std::string& name, const json& value,
                                               const std::string& file) {
  SafetensorsEntryInfo info;
  info.name = name;
  if (!value.is_object()) {
    return TensorError(file, name, absl::StrCat("entry must be an object, got ",
                                                JsonTypeName(value)));
  }
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!value.contains(key)) {
      return TensorError(file, name, absl::StrCat("missing \"", key, "\""));
    }
  }
  const json& dtype = value["dtype"];
  if (!dtype.is_string()) {
    return TensorError(file, name,
                       absl::StrCat("\"dtype\" must be a string, got ", JsonTypeName(dtype)));
  }
  absl::StatusOr<DType> parsed = DTypeFromName(dtype.get<std::string>());
  if (!parsed.ok()) return TensorError(file, name, parsed.status().message());
  info.dtype = *parsed;

  // Dimensions above int64 cannot be held in a Shape (the reference allows them only in
  // an empty tensor, e.g. [0, 2^63]).
  TPSERVE_ASSIGN_OR_RETURN(
      std::vector<uint64_t> shape,
      ParseUnsignedArray(value["shape"], std::numeric_limits<int64_t>::max(), file, name, "shape"));
  info.shape.assign(shape.begin(), shape.end());

  TPSERVE_ASSIGN_OR_RETURN(
      std::vector<uint64_t> offsets,
      ParseUnsignedArray(value["data_offsets"], std::numeric_limits<uint64_t>::max(), file, name,
                         "data_offsets"));
  if (offsets.size() != 2) {
    return TensorError(file, name, absl::StrCat("\"data_offsets\" must be [begin, end], got ",
                                                offsets.size(), " values"));
  }
  info.begin = offsets[0];
  info.end = offsets[1];
  if (info.end < info.begin) {
    return TensorError(file, name, absl::StrCat("data_offsets [", info.begin, ", ", info.end,
                                                "] end before they begin"));
  }
  return info;
}

// Shape product × dtype size, or an error if it overflows 64 bits.
absl::StatusOr<uint64_t> ByteSize(const SafetensorsEntryInfo& info, const std::string& file) {
  uint64_t n = DTypeSize(info.dtype);
  for (int64_t d : info.shape) {
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) {
      return TensorError(file, info.name,
                         absl::StrCat("shape ", ShapeToString(info.shape), " × ",
                                      DTypeName(info.dtype), " overflows 64-bit byte count"));
    }
  }
  return n;
}

// The reference's Metadata::validate: sorted by offsets, the tensors tile the data buffer
// from 0 with no hole and no overlap, and each spans exactly its shape × dtype size.
// Returns the end of the last tensor.
absl::StatusOr<uint64_t> CheckLayout(const std::vector<SafetensorsEntryInfo>& entries,
                                     const std::string& file) {
  uint64_t start = 0;
  for (const SafetensorsEntryInfo& e : entries) {
    const std::string span = absl::StrCat("data_offsets [", e.begin, ", ", e.end, "]");
    if (e.begin > start) {
      return TensorError(file, e.name, absl::StrCat(span, " leave a hole: the previous tensor ends at ",
                                                    start, ", tensors must be contiguous"));
    }
    if (e.begin < start) {
      return TensorError(file, e.name,
                         absl::StrCat(span, " overlap the previous tensor, which ends at ", start));
    }
    TPSERVE_ASSIGN_OR_RETURN(uint64_t size, ByteSize(e, file));
    if (size != e.end - e.begin) {
      return TensorError(file, e.name,
                         absl::StrCat("shape ", ShapeToString(e.shape), " × ", DTypeName(e.dtype),
                                      " needs ", size, " bytes but data_offsets span ",
                                      e.end - e.begin));
    }
    start = e.end;
  }
  return start;
}

// shape's multi-index of flat element i, e.g. "[3, 17]".
std::string IndexOf(const Shape& shape, int64_t i) {
  std::vector<int64_t> index(shape.size());
  for (int64_t rest = i, d = static_cast<int64_t>(index.size()) - 1; d >= 0; --d) {
    index[d] = rest % shape[d];
    rest /= shape[d];
  }
  return ShapeToString(index);
}

absl::Status CheckShapeAndDtype(const TensorView& view, const Shape& expected_shape) {
  if (view.shape != expected_shape) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", view.name, " in ", view.file, " has shape ",
                     ShapeToString(view.shape), ", expected ", ShapeToString(expected_shape)));
  }
  if (!IsFloatWeightType(view.dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", view.name, " in ", view.file, " has dtype ",
                     DTypeName(view.dtype), "; only F32, BF16 and F16 weights convert"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(absl::Span<const uint8_t> file_bytes,
                                                         const std::string& file) {
  SafetensorsHeader header;
  TPSERVE_ASSIGN_OR_RETURN(uint64_t n, ReadHeaderLength(file_bytes, file));
  header.header_size = n;
  const absl::Span<const uint8_t> text = file_bytes.subspan(kLengthBytes, n);
  if (size_t bad = FindInvalidUtf8(text); bad != std::string::npos) {
    return FileError(file, absl::StrCat("header is not valid UTF-8 (byte ", bad, ")"));
  }
  TPSERVE_ASSIGN_OR_RETURN(
      json root,
      ParseJsonObject(absl::string_view(reinterpret_cast<const char*>(text.data()), text.size()),
                      absl::StrCat(file, ": header"), /*reject_duplicate_keys=*/true));

  for (const auto& [key, value] : root.items()) {
    if (key == "__metadata__") {
      TPSERVE_ASSIGN_OR_RETURN(header.metadata, ParseMetadata(value, file));
      continue;
    }
    TPSERVE_ASSIGN_OR_RETURN(SafetensorsEntryInfo entry, ParseEntry(key, value, file));
    header.entries.push_back(std::move(entry));
  }
  std::sort(header.entries.begin(), header.entries.end(),
            [](const SafetensorsEntryInfo& a, const SafetensorsEntryInfo& b) {
              return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
            });
  TPSERVE_ASSIGN_OR_RETURN(uint64_t data_end, CheckLayout(header.entries, file));
  const uint64_t data_size = file_bytes.size() - kLengthBytes - n;
  if (data_end != data_size) {
    return FileError(file, absl::StrCat("tensors cover ", data_end, " bytes of data but the file "
                                        "holds ", data_size, " bytes after the header; the data "
                                        "buffer must be covered exactly"));
  }
  return header;
}

absl::StatusOr<Tensor> TensorViewToFloat(const TensorView& view, const Shape& expected_shape) {
  Tensor out;
  TPSERVE_RETURN_IF_ERROR(TensorViewToFloatInto(view, expected_shape, &out));
  return out;
}

absl::Status TensorViewToFloatInto(const TensorView& view, const Shape& expected_shape,
                                   Tensor* out) {
  TPSERVE_RETURN_IF_ERROR(CheckShapeAndDtype(view, expected_shape));
  out->Resize(view.shape);
  // Memory-bound: a large tensor converts (and first touches its pages) on several cores.
  const size_t element = DTypeSize(view.dtype);
  std::atomic<bool> failed{false};
  absl::Status first_error;
  ParallelForBulk(out->numel(), sizeof(float), [&](int64_t begin, int64_t end) {
    absl::Status s =
        ConvertToFloat(view.dtype, static_cast<const uint8_t*>(view.data) + begin * element,
                       static_cast<size_t>(end - begin), out->data() + begin);
    if (!s.ok() && !failed.exchange(true)) first_error = s;
  });
  if (!failed) return absl::OkStatus();
  // Only a non-finite value fails a float dtype here: name the tensor and where it is.
  for (int64_t i = 0; i < out->numel(); ++i) {
    if (std::isfinite(out->data()[i])) continue;
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", view.name, " in ", view.file, " holds a non-finite value (",
                     out->data()[i], ") at ", IndexOf(view.shape, i),
                     "; a NaN or Inf weight would make every logit non-finite"));
  }
  return first_error;
}

absl::StatusOr<WeightView> TensorViewToWeight(const TensorView& view,
                                              const Shape& expected_shape) {
  TPSERVE_RETURN_IF_ERROR(CheckShapeAndDtype(view, expected_shape));
  return WeightView{view.data, view.dtype, view.shape, /*file_mapped=*/true};
}

void ReleaseTensorPages(const TensorView& view) {
  if (view.data == nullptr || view.nbytes == 0) return;
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(view.data) & ~(page - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(view.data) + view.nbytes;
  // Advice only: on failure the pages simply stay resident.
  (void)::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  auto file = std::unique_ptr<SafetensorsFile>(new SafetensorsFile);
  file->path_ = path;
  // A FIFO or device in place of a shard is refused here, before anything blocks on it.
  TPSERVE_ASSIGN_OR_RETURN(RegularFile opened, RegularFile::Open(path));
  const size_t size = static_cast<size_t>(opened.size());
  if (size > 0) {  // mmap rejects an empty range; the parser reports the short file
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, opened.fd(), 0);
    if (p == MAP_FAILED) {
      return absl::InternalError(absl::StrCat(path, ": mmap failed: ", std::strerror(errno)));
    }
    file->mapping_ = p;
    file->mapping_size_ = size;
  }
  // `opened` closes at return; the mapping keeps the file open.

  const auto* base = static_cast<const uint8_t*>(file->mapping_);
  TPSERVE_ASSIGN_OR_RETURN(SafetensorsHeader header,
                           ParseSafetensorsHeader(absl::MakeConstSpan(base, size), path));
  file->metadata_ = std::move(header.metadata);
  const uint8_t* data = base + kLengthBytes + header.header_size;
  for (const SafetensorsEntryInfo& e : header.entries) {
    file->tensors_.push_back(TensorView{e.name, path, e.dtype, e.shape, data + e.begin,
                                        static_cast<size_t>(e.end - e.begin)});
  }
  std::sort(file->tensors_.begin(), file->tensors_.end(),
            [](const TensorView& a, const TensorView& b) { return a.name < b.name; });
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_size_);
}

const TensorView* SafetensorsFile::Find(absl::string_view name) const {
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                             [](const TensorView& t, absl::string_view n) { return t.name < n; });
  if (it == tensors_.end() || it->name != name) return nullptr;
  return &*it;
}

}  // namespace tpserve
