#include "worker/loader/safetensors_writer.h"

#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace tpserve {

namespace {

std::string LittleEndian64(uint64_t v) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return out;
}

}  // namespace

std::string FrameSafetensors(absl::string_view header_json, absl::string_view data) {
  return absl::StrCat(LittleEndian64(header_json.size()), header_json, data);
}

absl::Status WriteSafetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const SafetensorsTensor& t : tensors) {
    const uint64_t expected = static_cast<uint64_t>(NumElements(t.shape)) * DTypeSize(t.dtype);
    if (t.bytes.size() != expected) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", t.name, ": shape ", ShapeToString(t.shape), " × ",
                       DTypeName(t.dtype), " needs ", expected, " bytes, got ", t.bytes.size()));
    }
    header[t.name] = {{"dtype", DTypeName(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + expected}}};
    offset += expected;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const std::exception& e) {  // e.g. a tensor name that is not UTF-8
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot write header: ", e.what()));
  }
  text.append((8 - text.size() % 8) % 8, ' ');

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::InternalError(absl::StrCat(path, ": cannot open for writing"));
  out << LittleEndian64(text.size()) << text;
  for (const SafetensorsTensor& t : tensors) out.write(t.bytes.data(), t.bytes.size());
  out.close();
  if (!out) return absl::InternalError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

absl::Status WriteSafetensorsIndex(const std::string& path,
                                   const std::map<std::string, std::string>& weight_map) {
  nlohmann::json index = {{"metadata", nlohmann::json::object()}, {"weight_map", weight_map}};
  try {
    return WriteBinaryFile(path, index.dump(2));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot write index: ", e.what()));
  }
}

absl::Status WriteBinaryFile(const std::string& path, absl::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::InternalError(absl::StrCat(path, ": cannot open for writing"));
  out.write(bytes.data(), bytes.size());
  out.close();
  if (!out) return absl::InternalError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

std::string F32Bytes(const std::vector<float>& values) {
  std::string out(values.size() * 4, '\0');
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

std::string Bf16Bytes(const std::vector<float>& values) {
  std::string out(values.size() * 2, '\0');
  for (size_t i = 0; i < values.size(); ++i) {
    const uint16_t v = FloatToBf16(values[i]);
    std::memcpy(out.data() + 2 * i, &v, 2);
  }
  return out;
}

}  // namespace tpserve
