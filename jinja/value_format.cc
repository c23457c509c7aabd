#include "jinja/value_format.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "jinja/unicode.h"
#include "jinja/value.h"

namespace tpserve::jinja {
namespace {

void AppendRepr(const Value& v, std::string* out);

void AppendSequence(const ValueList& items, bool tuple, std::string* out) {
  out->push_back(tuple ? '(' : '[');
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out->append(", ");
    AppendRepr(items[i], out);
  }
  if (tuple && items.size() == 1) out->push_back(',');
  out->push_back(tuple ? ')' : ']');
}

void AppendMap(const ValueMap& map, std::string* out) {
  out->push_back('{');
  bool first = true;
  for (const auto& [key, value] : map.entries()) {
    if (!first) out->append(", ");
    first = false;
    AppendRepr(key, out);
    out->append(": ");
    AppendRepr(value, out);
  }
  out->push_back('}');
}

void AppendRepr(const Value& v, std::string* out) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: out->append("Undefined"); return;
    case Value::Kind::kString: out->append(PyStringRepr(v.AsString())); return;
    case Value::Kind::kList: AppendSequence(v.AsList(), false, out); return;
    case Value::Kind::kTuple: AppendSequence(v.AsList(), true, out); return;
    case Value::Kind::kDict: AppendMap(v.AsMap(), out); return;
    case Value::Kind::kNamespace:
      out->append("<Namespace ");
      AppendMap(v.AsMap(), out);
      out->push_back('>');
      return;
    default: out->append(v.Str()); return;
  }
}

}  // namespace

std::string PyFloatRepr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  char buf[64];
  auto result = std::to_chars(buf, buf + sizeof(buf), f, std::chars_format::scientific);
  std::string sci(buf, result.ptr);
  // sci is "[-]d[.ddd]e(+|-)XX": split into sign, digits and exponent.
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t e_pos = sci.find('e');
  std::string digits = sci.substr(0, e_pos);
  if (digits.size() > 1) digits.erase(1, 1);  // drop the '.'
  const int exponent = std::atoi(sci.c_str() + e_pos + 1);
  const int decpt = exponent + 1;  // digits before the decimal point
  if (decpt > -4 && decpt <= 16) {
    std::string text;
    if (decpt <= 0) {
      text = "0." + std::string(-decpt, '0') + digits;
    } else if (static_cast<size_t>(decpt) >= digits.size()) {
      text = digits + std::string(decpt - digits.size(), '0') + ".0";
    } else {
      text = digits.substr(0, decpt) + "." + digits.substr(decpt);
    }
    return sign + text;
  }
  std::string mantissa = digits.substr(0, 1);
  if (digits.size() > 1) mantissa += "." + digits.substr(1);
  return absl::StrFormat("%s%se%c%02d", sign, mantissa, exponent < 0 ? '-' : '+',
                         std::abs(exponent));
}

std::string PyStringRepr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t start = pos;
    const char32_t cp = NextCodePoint(s, &pos);
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(cp));
    } else if (cp == '\n') {
      out.append("\\n");
    } else if (cp == '\r') {
      out.append("\\r");
    } else if (cp == '\t') {
      out.append("\\t");
    } else if (cp < 0x80 ? (cp < 0x20 || cp == 0x7F) : !IsPyPrintable(cp)) {
      if (cp < 0x100) out.append(absl::StrFormat("\\x%02x", static_cast<unsigned>(cp)));
      else if (cp < 0x10000) out.append(absl::StrFormat("\\u%04x", static_cast<unsigned>(cp)));
      else out.append(absl::StrFormat("\\U%08x", static_cast<unsigned>(cp)));
    } else {
      out.append(s.substr(start, pos - start));
    }
  }
  out.push_back(quote);
  return out;
}

std::string Value::Str() const {
  switch (kind_) {
    case Kind::kUndefined: return "";
    case Kind::kNone: return "None";
    case Kind::kBool: return scalar_.b ? "True" : "False";
    case Kind::kInt: return absl::StrCat(scalar_.i);
    case Kind::kFloat: return PyFloatRepr(scalar_.f);
    case Kind::kString: return AsString();
    case Kind::kCallable: return AsCallable().Describe();
    default: return Repr();
  }
}

std::string Value::Repr() const {
  if (kind_ != Kind::kString && kind_ != Kind::kUndefined && !is_sequence() && !is_dict() &&
      !is_namespace()) {
    return Str();
  }
  std::string out;
  AppendRepr(*this, &out);
  return out;
}

}  // namespace tpserve::jinja
