#include "jinja/lexer.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/utf8.h"
#include "jinja/unicode.h"

namespace tpserve::jinja {
namespace {

using Type = LexToken::Type;

constexpr std::string_view kOpeners[] = {"{{", "{%", "{#"};

bool IsNameStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool IsNameChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Python's str.rstrip() of template text before a "-" tag.
std::string_view RStripSpace(std::string_view text) { return PyStrip(text, nullptr, false, true); }

bool AllSpace(std::string_view text) {
  if (text.empty()) return false;
  size_t pos = 0;
  while (pos < text.size()) {
    if (!IsPySpace(NextCodePoint(text, &pos))) return false;
  }
  return true;
}

class Lexer {
 public:
  Lexer(std::string_view source, std::string_view name) : src_(source), name_(name) {
    for (int k = 0; k < 3; ++k) next_open_[k] = src_.find(kOpeners[k]);
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  absl::StatusOr<std::vector<LexToken>> Run() {
    while (pos_ < src_.size()) TPSERVE_RETURN_IF_ERROR(LexRoot());
    Push(Type::kEnd, "", src_.size());
    return std::move(tokens_);
  }

 private:
  absl::Status Error(size_t at, std::string_view message) const {
    const auto [line, column] = Location(at);
    return absl::InvalidArgumentError(absl::StrCat(std::string(name_), ":", line, ":", column, ": ", std::string(message)));
  }

  // Line and column (in code points) of src_[at]. Tokens arrive in order, so
  // the column counts on from the previous token's on the same line.
  std::pair<int, int> Location(size_t at) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), at) - 1;
    const size_t start = *it;
    const int line = static_cast<int>(it - line_starts_.begin()) + 1;
    size_t from = start;
    int column = 1;
    if (last_line_ == line && last_at_ <= at) {
      from = last_at_;
      column = last_column_;
    }
    column += static_cast<int>(CodePointCount(src_.substr(from, at - from)));
    last_line_ = line;
    last_at_ = at;
    last_column_ = column;
    return {line, column};
  }

  LexToken& Push(Type type, std::string text, size_t at) {
    LexToken token;
    token.type = type;
    token.text = std::move(text);
    std::tie(token.line, token.column) = Location(at);
    tokens_.push_back(std::move(token));
    return tokens_.back();
  }

  char At(size_t i) const { return i < src_.size() ? src_[i] : '\0'; }
  bool StartsWith(size_t i, std::string_view s) const { return src_.substr(i, s.size()) == s; }

  size_t SkipSpace(size_t i) const {
    while (i < src_.size()) {
      size_t next = i;
      if (!IsPySpace(NextCodePoint(src_, &next))) break;
      i = next;
    }
    return i;
  }

  // Text before a tag, stripped by the tag's sign or lstrip_blocks.
  void PushText(std::string_view text, size_t at, char sign, bool is_variable) {
    if (sign == '-') {
      text = RStripSpace(text);
    } else if (sign != '+' && !is_variable) {
      const size_t newline = text.rfind('\n');
      const size_t l_pos = newline == std::string_view::npos ? 0 : newline + 1;
      if ((l_pos > 0 || line_starting_) && AllSpace(text.substr(l_pos))) {
        text = text.substr(0, l_pos);
      }
    }
    if (!text.empty()) Push(Type::kData, std::string(text), at);
  }

  // End of a raw opening tag at `i`, or npos: {%[-+]? \s* raw \s* (-%}\s*|%}).
  size_t MatchRawBegin(size_t i) const {
    i += 2;
    if (At(i) == '-' || At(i) == '+') ++i;
    i = SkipSpace(i);
    if (!StartsWith(i, "raw")) return std::string_view::npos;
    i = SkipSpace(i + 3);
    if (StartsWith(i, "-%}")) return SkipSpace(i + 3);
    if (StartsWith(i, "%}")) return i + 2;
    return std::string_view::npos;
  }

  absl::Status LexRoot() {
    // The next "{{", "{%" and "{#" at or after pos_, each searched again only
    // once passed, so that lexing stays linear in the source.
    size_t tag = src_.size();
    for (int k = 0; k < 3; ++k) {
      if (next_open_[k] < pos_) next_open_[k] = src_.find(kOpeners[k], pos_);
      tag = std::min(tag, next_open_[k]);
    }
    if (tag == std::string_view::npos || tag >= src_.size()) {
      Push(Type::kData, std::string(src_.substr(pos_)), pos_);
      pos_ = src_.size();
      return absl::OkStatus();
    }
    const char kind = src_[tag + 1];
    const char sign = (At(tag + 2) == '-' || At(tag + 2) == '+') ? At(tag + 2) : '\0';
    PushText(src_.substr(pos_, tag - pos_), pos_, sign, kind == '{');
    const size_t after = tag + 2 + (sign != '\0' ? 1 : 0);
    line_starting_ = false;
    if (kind == '#') return LexComment(tag, after);
    if (kind == '%') {
      const size_t raw_end = MatchRawBegin(tag);
      if (raw_end != std::string_view::npos) {
        line_starting_ = src_[raw_end - 1] == '\n';
        return LexRaw(tag, raw_end);
      }
    }
    Push(kind == '{' ? Type::kVariableBegin : Type::kBlockBegin, "", tag);
    pos_ = after;
    return LexTag(kind == '{', tag);
  }

  absl::Status LexComment(size_t tag, size_t i) {
    const size_t close = src_.find("#}", i);
    if (close == std::string_view::npos) return Error(tag, "Missing end of comment tag");
    const char sign = close > i ? src_[close - 1] : '\0';
    size_t end = close + 2;
    if (sign == '-') end = SkipSpace(end);
    else if (sign != '+' && At(end) == '\n') ++end;
    pos_ = end;
    line_starting_ = src_[end - 1] == '\n';
    return absl::OkStatus();
  }

  // The end of the raw block's closing tag starting at `i`, or npos.
  size_t MatchEndRaw(size_t i) const {
    i += 2;
    if (At(i) == '-' || At(i) == '+') ++i;
    i = SkipSpace(i);
    if (!StartsWith(i, "endraw")) return std::string_view::npos;
    i = SkipSpace(i + 6);
    if (StartsWith(i, "+%}")) return i + 3;
    if (StartsWith(i, "-%}")) return SkipSpace(i + 3);
    if (StartsWith(i, "%}")) return At(i + 2) == '\n' ? i + 3 : i + 2;
    return std::string_view::npos;
  }

  absl::Status LexRaw(size_t tag, size_t body) {
    for (size_t i = src_.find("{%", body); i != std::string_view::npos; i = src_.find("{%", i + 1)) {
      const size_t end = MatchEndRaw(i);
      if (end == std::string_view::npos) continue;
      const char sign = (At(i + 2) == '-' || At(i + 2) == '+') ? At(i + 2) : '\0';
      PushText(src_.substr(body, i - body), body, sign, false);
      pos_ = end;
      line_starting_ = src_[end - 1] == '\n';
      return absl::OkStatus();
    }
    return Error(tag, "Missing end of raw directive");
  }

  // Tokens inside {{ }} or {% %} up to and including the closing delimiter.
  absl::Status LexTag(bool variable, size_t tag) {
    std::vector<char> brackets;
    while (true) {
      if (pos_ >= src_.size()) return absl::OkStatus();  // the parser reports it
      if (brackets.empty() && LexTagEnd(variable)) return absl::OkStatus();
      const size_t next = SkipSpace(pos_);
      if (next != pos_) {
        pos_ = next;
        continue;
      }
      TPSERVE_RETURN_IF_ERROR(LexExpressionToken(&brackets));
    }
  }

  bool LexTagEnd(bool variable) {
    const char* close = variable ? "}}" : "%}";
    const size_t start = pos_;
    if (StartsWith(pos_, std::string("-") + close)) {
      pos_ = SkipSpace(pos_ + 3);
    } else if (!variable && StartsWith(pos_, "+%}")) {
      pos_ += 3;
    } else if (StartsWith(pos_, close)) {
      pos_ += 2;
      if (!variable && At(pos_) == '\n') ++pos_;
    } else {
      return false;
    }
    Push(variable ? Type::kVariableEnd : Type::kBlockEnd, "", start);
    line_starting_ = src_[pos_ - 1] == '\n';
    return true;
  }

  absl::Status LexExpressionToken(std::vector<char>* brackets) {
    const char c = src_[pos_];
    if (IsDigit(c)) return LexNumber();
    if (IsNameStart(c)) {
      size_t end = pos_;
      while (end < src_.size() && IsNameChar(src_[end])) ++end;
      Push(Type::kName, std::string(src_.substr(pos_, end - pos_)), pos_);
      pos_ = end;
      return absl::OkStatus();
    }
    if (c == '\'' || c == '"') return LexString();
    return LexOperator(brackets);
  }

  absl::Status LexOperator(std::vector<char>* brackets) {
    static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (std::string_view op : kTwo) {
      if (StartsWith(pos_, op)) {
        Push(Type::kOperator, std::string(op), pos_);
        pos_ += 2;
        return absl::OkStatus();
      }
    }
    const char c = src_[pos_];
    if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos) {
      size_t end = pos_;
      NextCodePoint(src_, &end);
      return Error(pos_, absl::StrCat("unexpected char '", std::string(src_.substr(pos_, end - pos_)), "'"));
    }
    if (c == '(' || c == '[' || c == '{') {
      brackets->push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (brackets->empty()) return Error(pos_, absl::StrCat("unexpected '", std::string(1, c), "'"));
      if (brackets->back() != c) {
        return Error(pos_, absl::StrCat("unexpected '", std::string(1, c), "', expected '",
                                        std::string(1, brackets->back()), "'"));
      }
      brackets->pop_back();
    }
    Push(Type::kOperator, std::string(1, c), pos_);
    ++pos_;
    return absl::OkStatus();
  }

  // Digits with optional single underscores between them, from `i`.
  size_t ScanDigits(size_t i, int base) const {
    auto is_digit = [base](char ch) {
      if (base == 16) return std::isxdigit(static_cast<unsigned char>(ch)) != 0;
      return ch >= '0' && ch < static_cast<char>('0' + base);
    };
    if (!is_digit(At(i))) return i;
    ++i;
    while (is_digit(At(i)) || (At(i) == '_' && is_digit(At(i + 1)))) ++i;
    return i;
  }

  absl::Status LexNumber();
  absl::Status LexString();

  std::string_view src_;
  std::string_view name_;
  std::vector<size_t> line_starts_;
  std::vector<LexToken> tokens_;
  size_t pos_ = 0;
  bool line_starting_ = true;
  size_t next_open_[3];  // LexRoot's search positions (npos: none left)
  mutable int last_line_ = 0;  // Location's previous answer
  mutable size_t last_at_ = 0;
  mutable int last_column_ = 1;
};

std::string WithoutUnderscores(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c != '_') out.push_back(c);
  }
  return out;
}

absl::Status Lexer::LexNumber() {
  const size_t start = pos_;
  const char prefix = static_cast<char>(std::tolower(static_cast<unsigned char>(At(pos_ + 1))));
  if (src_[pos_] == '0' && (prefix == 'x' || prefix == 'o' || prefix == 'b')) {
    const int base = prefix == 'x' ? 16 : prefix == 'o' ? 8 : 2;
    size_t digits = pos_ + 2;
    if (At(digits) == '_') ++digits;
    const size_t end = ScanDigits(digits, base);
    if (end > digits) {
      const std::string text = WithoutUnderscores(src_.substr(digits, end - digits));
      errno = 0;
      const unsigned long long v = std::strtoull(text.c_str(), nullptr, base);
      if (errno != 0 || v > static_cast<unsigned long long>(INT64_MAX)) {
        return Error(start, "integer literal too large");
      }
      Push(Type::kInteger, std::string(src_.substr(start, end - start)), start).int_value =
          static_cast<int64_t>(v);
      pos_ = end;
      return absl::OkStatus();
    }
  }
  size_t end = ScanDigits(pos_, 10);
  bool is_float = false;
  if (At(end) == '.' && IsDigit(At(end + 1))) {
    end = ScanDigits(end + 1, 10);
    is_float = true;
  }
  if (At(end) == 'e' || At(end) == 'E') {
    size_t exp = end + 1;
    if (At(exp) == '+' || At(exp) == '-') ++exp;
    const size_t exp_end = ScanDigits(exp, 10);
    if (exp_end > exp) {
      end = exp_end;
      is_float = true;
    }
  }
  const std::string text = WithoutUnderscores(src_.substr(start, end - start));
  if (is_float) {
    Push(Type::kFloat, text, start).float_value = std::strtod(text.c_str(), nullptr);
  } else {
    errno = 0;
    const long long v = std::strtoll(text.c_str(), nullptr, 10);
    if (errno != 0) return Error(start, "integer literal too large");
    Push(Type::kInteger, text, start).int_value = v;
  }
  pos_ = end;
  return absl::OkStatus();
}

// Appends the escape at src_[*i] (just after the backslash), as Python's
// unicode-escape codec reads it; unknown escapes stay as written.
void AppendEscape(std::string_view src, size_t* i, std::string* out) {
  const char c = src[*i];
  auto hex_value = [&](size_t start, size_t len, char32_t* cp) {
    if (start + len > src.size()) return false;
    char32_t v = 0;
    for (size_t k = start; k < start + len; ++k) {
      if (!std::isxdigit(static_cast<unsigned char>(src[k]))) return false;
      v = v * 16 + static_cast<char32_t>(std::isdigit(static_cast<unsigned char>(src[k]))
                                             ? src[k] - '0'
                                             : std::tolower(static_cast<unsigned char>(src[k])) - 'a' + 10);
    }
    *cp = v;
    return true;
  };
  static constexpr std::string_view kSimple = "\n\\'\"abfnrtv";
  static constexpr std::string_view kValues("\0\\'\"\a\b\f\n\r\t\v", 11);
  const size_t simple = kSimple.find(c);
  if (simple != std::string_view::npos) {
    if (simple > 0) out->push_back(kValues[simple]);  // backslash-newline is dropped
    ++*i;
    return;
  }
  if (c >= '0' && c <= '7') {
    char32_t v = 0;
    size_t k = *i;
    while (k < src.size() && k < *i + 3 && src[k] >= '0' && src[k] <= '7') v = v * 8 + (src[k++] - '0');
    AppendUtf8(v, out);
    *i = k;
    return;
  }
  const size_t len = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
  char32_t cp = 0;
  if (len > 0 && hex_value(*i + 1, len, &cp) && cp <= 0x10FFFF && (cp < 0xD800 || cp > 0xDFFF)) {
    AppendUtf8(cp, out);
    *i += 1 + len;
    return;
  }
  out->push_back('\\');
}

absl::Status Lexer::LexString() {
  const char quote = src_[pos_];
  std::string value;
  size_t i = pos_ + 1;
  while (i < src_.size() && src_[i] != quote) {
    if (src_[i] == '\\' && i + 1 < src_.size()) {
      ++i;
      AppendEscape(src_, &i, &value);
    } else {
      value.push_back(src_[i++]);
    }
  }
  if (i >= src_.size()) return Error(pos_, absl::StrCat("unexpected char '", std::string(1, quote), "'"));
  Push(Type::kString, std::move(value), pos_);
  pos_ = i + 1;
  return absl::OkStatus();
}

}  // namespace

std::string NormalizeSource(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

absl::StatusOr<std::vector<LexToken>> Tokenize(std::string_view source, std::string_view name) {
  return Lexer(source, name).Run();
}

}  // namespace tpserve::jinja
