#include "server/tokenizer/byte_level.h"

#include <iterator>

#include "base/utf8.h"

namespace tpserve {
namespace {

struct Tables {
  constexpr Tables() : to_unicode(), to_byte() {
    for (int& b : to_byte) b = -1;
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      to_unicode[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(next++);
      to_byte[to_unicode[b]] = b;
    }
  }
  char32_t to_unicode[256];
  int to_byte[324];  // every mapped code point is below 256 + 68
};

constexpr Tables kTables;

const Tables& GetTables() { return kTables; }

}  // namespace

char32_t ByteToUnicode(unsigned char byte) { return GetTables().to_unicode[byte]; }

std::optional<unsigned char> UnicodeToByte(char32_t cp) {
  const Tables& t = GetTables();
  if (cp >= std::size(t.to_byte) || t.to_byte[cp] < 0) return std::nullopt;
  return static_cast<unsigned char>(t.to_byte[cp]);
}

bool AppendByteLevelBytes(std::string_view token, std::string* out) {
  const size_t old_size = out->size();
  size_t pos = 0;
  while (pos < token.size()) {
    const unsigned char lead = static_cast<unsigned char>(token[pos]);
    std::optional<unsigned char> b;
    if (lead < 0x80) {  // ASCII: printable ones map to themselves
      if (kTables.to_byte[lead] >= 0) b = lead;
      ++pos;
    } else {
      b = UnicodeToByte(NextCodePoint(token, &pos));
    }
    if (!b.has_value()) {
      out->resize(old_size);
      return false;
    }
    out->push_back(static_cast<char>(*b));
  }
  return true;
}

std::optional<std::string> ByteLevelToBytes(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  size_t pos = 0;
  while (pos < token.size()) {
    const std::optional<unsigned char> b = UnicodeToByte(NextCodePoint(token, &pos));
    if (!b.has_value()) return std::nullopt;
    out.push_back(static_cast<char>(*b));
  }
  return out;
}

}  // namespace tpserve
