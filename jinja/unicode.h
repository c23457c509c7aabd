// UTF-8 and Unicode helpers with Python's str semantics: code-point indexing,
// whitespace, case mapping and character classes (Python's str methods and
// repr() decide by Unicode general category; ICU supplies the tables).
// Invalid UTF-8 bytes are treated as one code point each (U+FFFD for classes),
// so no input makes these functions fail. Pure functions; thread-safe.
#ifndef TPSERVE_JINJA_UNICODE_H_
#define TPSERVE_JINJA_UNICODE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tpserve::jinja {

// Splits into code points; each piece is a view of `s` (one to four bytes).
std::vector<std::string_view> SplitCodePoints(std::string_view s);
size_t CodePointCount(std::string_view s);
// Decodes the code point starting at s[*pos] and advances *pos past it.
char32_t NextCodePoint(std::string_view s, size_t* pos);

// Python's str.isspace() for one code point.
bool IsPySpace(char32_t cp);
// Python's str.isprintable() for one code point (repr escapes the others).
bool IsPyPrintable(char32_t cp);
bool IsPyAlpha(char32_t cp);
bool IsPyDigit(char32_t cp);
bool IsPyDecimal(char32_t cp);
bool IsPyNumeric(char32_t cp);
bool IsPyAlnum(char32_t cp);
// Cased: uppercase, lowercase or titlecase letter (Python's cased characters).
bool IsPyCased(char32_t cp);
bool IsPyUpper(char32_t cp);
bool IsPyLower(char32_t cp);

// Full case mappings, as Python's str.upper() and str.lower().
std::string PyUpper(std::string_view s);
std::string PyLower(std::string_view s);
// Titlecase of one code point (Python's str.title() and capitalize() use it).
std::string PyTitleChar(char32_t cp);
// Python's str.title(), str.capitalize() and str.swapcase().
std::string PyTitle(std::string_view s);
std::string PyCapitalize(std::string_view s);

// Python's str.strip() family: with `chars` null, strips whitespace.
std::string_view PyStrip(std::string_view s, const std::string* chars, bool left, bool right);

// Python's str.splitlines(): breaks at \n, \r, \r\n, \v, \f, \x1c-\x1e, \x85,
// U+2028 and U+2029.
std::vector<std::string> PySplitLines(std::string_view s, bool keep_ends);

}  // namespace tpserve::jinja

#endif  // TPSERVE_JINJA_UNICODE_H_
