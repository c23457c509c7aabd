#include "worker/loader/npy.h"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace tpserve {
namespace {

constexpr char kMagic[] = "\x93NUMPY";

absl::Status NpyError(const std::string& path, absl::string_view rule) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", rule));
}

// Extracts the value text after `'key':` in a NumPy header dict.
bool FindValue(absl::string_view header, absl::string_view key, absl::string_view& value) {
  const size_t at = header.find(absl::StrCat("'", key, "':"));
  if (at == absl::string_view::npos) return false;
  value = absl::StripLeadingAsciiWhitespace(header.substr(at + key.size() + 3));
  return true;
}

}  // namespace

absl::Status WriteNpy(const std::string& path, const Tensor& t) {
  std::string shape = absl::StrJoin(t.shape(), ", ");
  if (t.rank() == 1) shape += ",";
  std::string header =
      absl::StrCat("{'descr': '<f4', 'fortran_order': False, 'shape': (", shape, "), }");
  // Magic (6) + version (2) + length (2) + header + '\n' must be a multiple of 64.
  header.append(63 - (10 + header.size()) % 64, ' ');
  header.push_back('\n');
  std::ofstream out(path, std::ios::binary);
  if (!out) return absl::NotFoundError(absl::StrCat(path, ": cannot open for writing"));
  const uint16_t len = static_cast<uint16_t>(header.size());
  out.write(kMagic, 6);
  out.put(1).put(0);
  out.put(static_cast<char>(len & 0xff)).put(static_cast<char>(len >> 8));
  out << header;
  out.write(reinterpret_cast<const char*>(t.data()), t.numel() * sizeof(float));
  if (!out) return absl::DataLossError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

absl::StatusOr<Tensor> ReadNpy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string bytes = buf.str();
  if (bytes.size() < 10 || std::memcmp(bytes.data(), kMagic, 6) != 0) {
    return NpyError(path, "not a .npy file (bad magic)");
  }
  const int major = static_cast<uint8_t>(bytes[6]);
  size_t header_len = 0, offset = 0;
  if (major == 1) {
    header_len = static_cast<uint8_t>(bytes[8]) | (static_cast<uint8_t>(bytes[9]) << 8);
    offset = 10;
  } else if (major == 2 && bytes.size() >= 12) {
    for (int i = 0; i < 4; ++i) header_len |= size_t{static_cast<uint8_t>(bytes[8 + i])} << (8 * i);
    offset = 12;
  } else {
    return NpyError(path, absl::StrCat("unsupported .npy version ", major));
  }
  if (offset + header_len > bytes.size()) return NpyError(path, "header runs past the end");
  const absl::string_view header(bytes.data() + offset, header_len);
  absl::string_view descr, order, shape_text;
  if (!FindValue(header, "descr", descr) || !absl::StartsWith(descr, "'<f4'")) {
    return NpyError(path, "dtype must be little-endian float32 ('<f4')");
  }
  if (!FindValue(header, "fortran_order", order) || !absl::StartsWith(order, "False")) {
    return NpyError(path, "arrays must be in C order");
  }
  if (!FindValue(header, "shape", shape_text) || !absl::ConsumePrefix(&shape_text, "(")) {
    return NpyError(path, "header has no shape tuple");
  }
  shape_text = shape_text.substr(0, shape_text.find(')'));
  Shape shape;
  for (absl::string_view dim : absl::StrSplit(shape_text, ',', absl::SkipWhitespace())) {
    int64_t d;
    if (!absl::SimpleAtoi(dim, &d) || d < 0 || d > (int64_t{1} << 40)) {
      return NpyError(path, absl::StrCat("bad dimension \"", dim, "\""));
    }
    shape.push_back(d);
  }
  const size_t data_bytes = bytes.size() - offset - header_len;
  if (data_bytes != static_cast<size_t>(NumElements(shape)) * sizeof(float)) {
    return NpyError(path, absl::StrCat("shape ", ShapeToString(shape), " needs ",
                                       NumElements(shape) * 4, " bytes, file holds ", data_bytes));
  }
  std::vector<float> data(NumElements(shape));
  std::memcpy(data.data(), bytes.data() + offset + header_len, data_bytes);
  return Tensor(std::move(shape), std::move(data));
}

}  // namespace tpserve
