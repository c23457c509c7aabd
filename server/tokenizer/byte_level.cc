#include "server/tokenizer/byte_level.h"

#include <array>

#include "server/tokenizer/utf8.h"

namespace tpserve {
namespace {

struct Tables {
  Tables() {
    to_byte.fill(-1);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      to_unicode[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(next++);
      to_byte[to_unicode[b]] = b;
    }
  }
  std::array<char32_t, 256> to_unicode;
  std::array<int, 324> to_byte;  // every mapped code point is below 256 + 68
};

const Tables& GetTables() {
  static const Tables tables;
  return tables;
}

}  // namespace

char32_t ByteToUnicode(unsigned char byte) { return GetTables().to_unicode[byte]; }

std::optional<unsigned char> UnicodeToByte(char32_t cp) {
  const Tables& t = GetTables();
  if (cp >= t.to_byte.size() || t.to_byte[cp] < 0) return std::nullopt;
  return static_cast<unsigned char>(t.to_byte[cp]);
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
