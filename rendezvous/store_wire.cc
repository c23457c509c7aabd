#include "rendezvous/store_wire.h"

namespace tpserve::store_wire {
namespace {

void PutLittleEndian(uint64_t v, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

uint64_t GetLittleEndian(absl::string_view b) {
  uint64_t v = 0;
  for (size_t i = 0; i < b.size(); ++i) v |= uint64_t{static_cast<unsigned char>(b[i])} << (8 * i);
  return v;
}

}  // namespace

Writer& Writer::U8(uint8_t v) {
  bytes_.push_back(static_cast<char>(v));
  return *this;
}

Writer& Writer::U32(uint32_t v) {
  PutLittleEndian(v, 4, &bytes_);
  return *this;
}

Writer& Writer::I64(int64_t v) {
  PutLittleEndian(static_cast<uint64_t>(v), 8, &bytes_);
  return *this;
}

Writer& Writer::Str(absl::string_view s) {
  U32(static_cast<uint32_t>(s.size()));
  bytes_.append(s.data(), s.size());
  return *this;
}

bool Reader::Take(size_t n, absl::string_view* out) {
  if (!ok_ || rest_.size() < n) return ok_ = false;
  *out = rest_.substr(0, n);
  rest_.remove_prefix(n);
  return true;
}

bool Reader::U8(uint8_t* v) {
  absl::string_view b;
  if (!Take(1, &b)) return false;
  *v = static_cast<uint8_t>(b[0]);
  return true;
}

bool Reader::U32(uint32_t* v) {
  absl::string_view b;
  if (!Take(4, &b)) return false;
  *v = static_cast<uint32_t>(GetLittleEndian(b));
  return true;
}

bool Reader::I64(int64_t* v) {
  absl::string_view b;
  if (!Take(8, &b)) return false;
  *v = static_cast<int64_t>(GetLittleEndian(b));
  return true;
}

bool Reader::Str(size_t max, std::string* s) {
  uint32_t n = 0;
  absl::string_view b;
  if (!U32(&n)) return false;
  if (n > max) return ok_ = false;
  if (!Take(n, &b)) return false;
  s->assign(b.data(), b.size());
  return true;
}

}  // namespace tpserve::store_wire
