#include "jinja/unicode.h"

#include <unicode/uchar.h>
#include <unicode/locid.h>
#include <unicode/unistr.h>

#include "base/utf8.h"

namespace tpserve::jinja {
namespace {

constexpr char32_t kReplacement = 0xFFFD;

std::string FromIcu(const icu::UnicodeString& u) {
  std::string out;
  u.toUTF8String(out);
  return out;
}

icu::UnicodeString ToIcu(std::string_view s) {
  return icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), static_cast<int32_t>(s.size())));
}

std::string LowerChar(char32_t cp) {
  icu::UnicodeString u(static_cast<UChar32>(cp));
  return FromIcu(u.toLower(icu::Locale::getRoot()));
}

}  // namespace

char32_t NextCodePoint(std::string_view s, size_t* pos) {
  const size_t len = ValidUtf8SequenceLength(s, *pos);
  const unsigned char lead = s[*pos];
  if (len == 0) {
    ++*pos;
    return kReplacement;
  }
  char32_t cp = len == 1 ? lead : lead & (0x7F >> len);
  for (size_t i = 1; i < len; ++i) cp = (cp << 6) | (s[*pos + i] & 0x3F);
  *pos += len;
  return cp;
}

std::vector<std::string_view> SplitCodePoints(std::string_view s) {
  std::vector<std::string_view> out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t start = pos;
    NextCodePoint(s, &pos);
    out.push_back(s.substr(start, pos - start));
  }
  return out;
}

size_t CodePointCount(std::string_view s) {
  size_t count = 0;
  size_t pos = 0;
  while (pos < s.size()) {
    NextCodePoint(s, &pos);
    ++count;
  }
  return count;
}

bool IsPySpace(char32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F);
  const UCharDirection dir = u_charDirection(cp);
  return dir == U_WHITE_SPACE_NEUTRAL || dir == U_BLOCK_SEPARATOR ||
         dir == U_SEGMENT_SEPARATOR || u_charType(cp) == U_SPACE_SEPARATOR;
}

bool IsPyPrintable(char32_t cp) {
  if (cp == ' ') return true;
  switch (u_charType(cp)) {
    case U_CONTROL_CHAR: case U_FORMAT_CHAR: case U_SURROGATE: case U_PRIVATE_USE_CHAR:
    case U_UNASSIGNED: case U_LINE_SEPARATOR: case U_PARAGRAPH_SEPARATOR:
    case U_SPACE_SEPARATOR:
      return false;
    default:
      return true;
  }
}

bool IsPyAlpha(char32_t cp) {
  switch (u_charType(cp)) {
    case U_UPPERCASE_LETTER: case U_LOWERCASE_LETTER: case U_TITLECASE_LETTER:
    case U_MODIFIER_LETTER: case U_OTHER_LETTER:
      return true;
    default:
      return false;
  }
}

bool IsPyDecimal(char32_t cp) { return u_charType(cp) == U_DECIMAL_DIGIT_NUMBER; }

bool IsPyDigit(char32_t cp) {
  const int type = u_getIntPropertyValue(cp, UCHAR_NUMERIC_TYPE);
  return type == U_NT_DECIMAL || type == U_NT_DIGIT;
}

bool IsPyNumeric(char32_t cp) {
  return u_getIntPropertyValue(cp, UCHAR_NUMERIC_TYPE) != U_NT_NONE;
}

bool IsPyAlnum(char32_t cp) { return IsPyAlpha(cp) || IsPyNumeric(cp); }
bool IsPyCased(char32_t cp) { return u_hasBinaryProperty(cp, UCHAR_CASED); }
bool IsPyUpper(char32_t cp) { return u_hasBinaryProperty(cp, UCHAR_UPPERCASE); }
bool IsPyLower(char32_t cp) { return u_hasBinaryProperty(cp, UCHAR_LOWERCASE); }

std::string PyUpper(std::string_view s) { return FromIcu(ToIcu(s).toUpper(icu::Locale::getRoot())); }
std::string PyLower(std::string_view s) { return FromIcu(ToIcu(s).toLower(icu::Locale::getRoot())); }

std::string PyTitleChar(char32_t cp) {
  icu::UnicodeString u(static_cast<UChar32>(cp));
  return FromIcu(u.toTitle(nullptr, icu::Locale::getRoot(), U_TITLECASE_NO_BREAK_ADJUSTMENT));
}

std::string PyTitle(std::string_view s) {
  std::string out;
  bool previous_cased = false;
  size_t pos = 0;
  while (pos < s.size()) {
    const char32_t cp = NextCodePoint(s, &pos);
    out += previous_cased ? LowerChar(cp) : PyTitleChar(cp);
    previous_cased = IsPyCased(cp);
  }
  return out;
}

std::string PyCapitalize(std::string_view s) {
  if (s.empty()) return "";
  size_t pos = 0;
  const char32_t first = NextCodePoint(s, &pos);
  return PyTitleChar(first) + PyLower(s.substr(pos));
}

std::string_view PyStrip(std::string_view s, const std::string* chars, bool left, bool right) {
  std::vector<char32_t> set;
  if (chars != nullptr) {
    size_t pos = 0;
    while (pos < chars->size()) set.push_back(NextCodePoint(*chars, &pos));
  }
  auto strippable = [&](char32_t cp) {
    if (chars == nullptr) return IsPySpace(cp);
    for (char32_t c : set) {
      if (c == cp) return true;
    }
    return false;
  };
  std::vector<size_t> starts;  // byte offset of each code point, then s.size()
  std::vector<char32_t> cps;
  size_t pos = 0;
  while (pos < s.size()) {
    starts.push_back(pos);
    cps.push_back(NextCodePoint(s, &pos));
  }
  starts.push_back(s.size());
  size_t first = 0;
  size_t last = cps.size();
  while (left && first < last && strippable(cps[first])) ++first;
  while (right && last > first && strippable(cps[last - 1])) --last;
  return s.substr(starts[first], starts[last] - starts[first]);
}

std::vector<std::string> PySplitLines(std::string_view s, bool keep_ends) {
  std::vector<std::string> lines;
  size_t start = 0;
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t at = pos;
    const char32_t cp = NextCodePoint(s, &pos);
    const bool is_break = cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C ||
                          (cp >= 0x1C && cp <= 0x1E) || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
    if (!is_break) continue;
    if (cp == '\r' && pos < s.size() && s[pos] == '\n') ++pos;
    lines.emplace_back(s.substr(start, (keep_ends ? pos : at) - start));
    start = pos;
  }
  if (start < s.size()) lines.emplace_back(s.substr(start));
  return lines;
}

}  // namespace tpserve::jinja
