#include "base/utf8.h"

#include "absl/strings/str_cat.h"

namespace tpserve {
namespace {

// Number of valid bytes of the (possibly truncated) sequence at text[pos], and the
// length the sequence needs; Unicode Table 3-7 "well-formed byte sequences".
struct SequencePrefix {
  size_t valid;
  size_t needed;
};

SequencePrefix ScanSequence(std::string_view text, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(pos);
  if (lead < 0x80) return {1, 1};
  size_t needed = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    needed = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    needed = 3;
    if (lead == 0xE0) lo = 0xA0;
    if (lead == 0xED) hi = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    needed = 4;
    if (lead == 0xF0) lo = 0x90;
    if (lead == 0xF4) hi = 0x8F;
  } else {
    return {0, 1};
  }
  size_t valid = 1;
  while (valid < needed && pos + valid < text.size()) {
    const unsigned char b = byte(pos + valid);
    const unsigned char min = valid == 1 ? lo : 0x80;
    const unsigned char max = valid == 1 ? hi : 0xBF;
    if (b < min || b > max) break;
    ++valid;
  }
  return {valid, needed};
}

}  // namespace

size_t ValidUtf8SequenceLength(std::string_view text, size_t pos) {
  const SequencePrefix s = ScanSequence(text, pos);
  return s.valid == s.needed ? s.valid : 0;
}

absl::Status ValidateUtf8(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    if (static_cast<unsigned char>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const size_t len = ValidUtf8SequenceLength(text, pos);
    if (len == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("text is not valid UTF-8 (bad byte at offset ", pos, ")"));
    }
    pos += len;
  }
  return absl::OkStatus();
}

char32_t NextCodePoint(std::string_view text, size_t* pos) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(*pos);
  const size_t len = Utf8LeadLength(lead);
  char32_t cp = len == 1 ? lead : len == 2 ? (lead & 0x1F) : len == 3 ? (lead & 0x0F) : (lead & 0x07);
  for (size_t i = 1; i < len; ++i) cp = (cp << 6) | (byte(*pos + i) & 0x3F);
  *pos += len;
  return cp;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string LossyUtf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    const SequencePrefix s = ScanSequence(bytes, pos);
    if (s.valid == s.needed) {
      out.append(bytes.data() + pos, s.valid);
      pos += s.valid;
    } else {
      out.append(kReplacementChar);
      pos += s.valid == 0 ? 1 : s.valid;
    }
  }
  return out;
}

}  // namespace tpserve
