// Filters on single values: text, numbers, defaults and tojson.
#include "jinja/filters.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "jinja/json_convert.h"
#include "jinja/methods.h"
#include "jinja/operators.h"
#include "jinja/renderer.h"
#include "jinja/string_format.h"
#include "jinja/unicode.h"

namespace tpserve::jinja {
namespace {

bool ArgTruthy(const CallArgs& args, size_t index, std::string_view name, bool dflt) {
  const Value* v = args.Get(index, name);
  return v == nullptr ? dflt : v->Truthy();
}

absl::StatusOr<Value> Default(Renderer&, const Value& input, const CallArgs& args) {
  const bool boolean = ArgTruthy(args, 1, "boolean", false);
  if (input.is_undefined() || (boolean && !input.Truthy())) {
    const Value* fallback = args.Get(0, "default_value");
    return fallback != nullptr ? *fallback : Value::String("");
  }
  return input;
}

absl::StatusOr<Value> Upper(Renderer&, const Value& input, const CallArgs&) { return Value::String(PyUpper(input.Str())); }
absl::StatusOr<Value> Lower(Renderer&, const Value& input, const CallArgs&) { return Value::String(PyLower(input.Str())); }
absl::StatusOr<Value> Capitalize(Renderer&, const Value& input, const CallArgs&) { return Value::String(PyCapitalize(input.Str())); }

// jinja2's title: words start after "-", whitespace, "(", "{", "[" or "<".
absl::StatusOr<Value> Title(Renderer&, const Value& input, const CallArgs&) {
  const std::string text = input.Str();
  std::string out;
  bool word_start = true;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t start = pos;
    const char32_t cp = NextCodePoint(text, &pos);
    const bool separator = IsPySpace(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
    if (separator) out.append(text, start, pos - start);
    else out += word_start ? PyUpper(text.substr(start, pos - start)) : PyLower(text.substr(start, pos - start));
    word_start = separator;
  }
  return Value::String(std::move(out));
}

absl::StatusOr<Value> Trim(Renderer&, const Value& input, const CallArgs& args) {
  const Value* chars = args.Get(0, "chars");
  const std::string text = input.Str();
  const std::string* set = chars != nullptr && chars->is_string() ? &chars->AsString() : nullptr;
  return Value::String(std::string(PyStrip(text, set, true, true)));
}

absl::StatusOr<Value> Replace(Renderer& renderer, const Value& input, const CallArgs& args) {
  const Value* old_text = args.Get(0, "old");
  const Value* new_text = args.Get(1, "new");
  if (old_text == nullptr || new_text == nullptr) return absl::InvalidArgumentError("replace() needs old and new");
  CallArgs method;
  method.positional = {Value::String(old_text->Str()), Value::String(new_text->Str())};
  if (const Value* count = args.Get(2, "count"); count != nullptr && count->Truthy()) method.positional.push_back(*count);
  return renderer.CallValue(GetAttribute(Value::String(input.Str()), "replace"), std::move(method));
}

absl::StatusOr<Value> ToJson(Renderer& renderer, const Value& input, const CallArgs& args) {
  JsonDumpOptions options;
  options.ensure_ascii = ArgTruthy(args, 0, "ensure_ascii", false);
  if (const Value* indent = args.Get(1, "indent"); indent != nullptr && !indent->is_none()) {
    if (indent->is_string()) options.indent = indent->AsString();
    else if (indent->is_int()) options.indent = std::string(std::max<int64_t>(0, std::min<int64_t>(indent->AsInt(), 1000)), ' ');
    else return absl::InvalidArgumentError("indent must be an int or a string");
  }
  if (const Value* seps = args.Get(2, "separators"); seps != nullptr && !seps->is_none()) {
    if (!seps->is_sequence() || seps->AsList().size() != 2 || !seps->AsList()[0].is_string() ||
        !seps->AsList()[1].is_string()) {
      return absl::InvalidArgumentError("separators must be a pair of strings");
    }
    options.item_separator = seps->AsList()[0].AsString();
    options.key_separator = seps->AsList()[1].AsString();
  }
  options.sort_keys = ArgTruthy(args, 3, "sort_keys", false);
  TPSERVE_ASSIGN_OR_RETURN(std::string text, PyJsonDumps(input, options));
  TPSERVE_RETURN_IF_ERROR(renderer.CheckSize(text.size()));
  return Value::String(std::move(text));
}

absl::StatusOr<Value> String(Renderer&, const Value& input, const CallArgs&) { return Value::String(input.Str()); }

// Python's int(text, base) for base 10 and 0x/0o/0b prefixes with base 0.
std::optional<int64_t> ParseInt(std::string_view text, int base) {
  std::string s(PyStrip(text, nullptr, true, true));
  std::string digits;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_' && i > 0 && i + 1 < s.size() && absl::ascii_isxdigit(s[i - 1]) && absl::ascii_isxdigit(s[i + 1])) continue;
    digits.push_back(s[i]);
  }
  if (digits.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(digits.c_str(), &end, base);
  if (errno != 0 || *end != '\0' || absl::ascii_isspace(digits[0])) return std::nullopt;
  return v;
}

absl::StatusOr<Value> Int(Renderer&, const Value& input, const CallArgs& args) {
  const Value* fallback = args.Get(0, "default");
  const Value dflt = fallback != nullptr ? *fallback : Value::Int(0);
  const Value* base_arg = args.Get(1, "base");
  const int base = base_arg != nullptr && base_arg->is_int() ? static_cast<int>(base_arg->AsInt()) : 10;
  if (input.is_undefined()) return UndefinedError(input);
  if (input.is_int() || input.is_bool()) return Value::Int(input.AsInt());
  if (input.is_float()) {
    if (!std::isfinite(input.AsFloat()) || std::fabs(input.AsFloat()) > 9.2e18) return dflt;
    return Value::Int(static_cast<int64_t>(input.AsFloat()));
  }
  if (input.is_string()) {
    if (base >= 2 && base <= 36) {
      if (auto v = ParseInt(input.AsString(), base)) return Value::Int(*v);
    }
    double d = 0;
    if (absl::SimpleAtod(std::string(PyStrip(input.AsString(), nullptr, true, true)), &d) && std::isfinite(d) && std::fabs(d) < 9.2e18) {
      return Value::Int(static_cast<int64_t>(d));
    }
  }
  return dflt;
}

absl::StatusOr<Value> Float(Renderer&, const Value& input, const CallArgs& args) {
  const Value* fallback = args.Get(0, "default");
  if (input.is_undefined()) return UndefinedError(input);
  if (input.is_number()) return Value::Float(input.AsFloat());
  if (input.is_string()) {
    std::string text(PyStrip(input.AsString(), nullptr, true, true));
    std::string lower = absl::AsciiStrToLower(text);
    if (lower == "inf" || lower == "+inf" || lower == "infinity") return Value::Float(INFINITY);
    if (lower == "-inf" || lower == "-infinity") return Value::Float(-INFINITY);
    if (lower == "nan" || lower == "+nan" || lower == "-nan") return Value::Float(NAN);
    double d = 0;
    if (!text.empty() && absl::SimpleAtod(text, &d) && lower.find("inf") == std::string::npos &&
        lower.find("nan") == std::string::npos) {
      return Value::Float(d);
    }
  }
  return fallback != nullptr ? *fallback : Value::Float(0.0);
}

absl::StatusOr<Value> Abs(Renderer&, const Value& input, const CallArgs&) {
  if (input.is_float()) return Value::Float(std::fabs(input.AsFloat()));
  if (input.is_int() || input.is_bool()) {
    if (input.AsInt() == INT64_MIN) return absl::InvalidArgumentError("integer overflow");
    return Value::Int(std::llabs(input.AsInt()));
  }
  if (input.is_undefined()) return UndefinedError(input);
  return absl::InvalidArgumentError(absl::StrCat("bad operand type for abs(): '", input.TypeName(), "'"));
}

// Python's round(x, ndigits): the exact binary value rounded half to even.
double PyRound(double x, int ndigits) {
  if (!std::isfinite(x)) return x;
  if (ndigits > 300) return x;
  if (ndigits < -300) return 0.0 * x;
  char buf[512];
  if (ndigits >= 0) {
    std::snprintf(buf, sizeof(buf), "%.*f", ndigits, x);
    return std::strtod(buf, nullptr);
  }
  const double scale = std::pow(10.0, -ndigits);
  const double y = x / scale;
  double r = std::nearbyint(y);
  return r * scale;
}

absl::StatusOr<Value> Round(Renderer&, const Value& input, const CallArgs& args) {
  const Value* precision_arg = args.Get(0, "precision");
  const int precision = precision_arg != nullptr && precision_arg->is_int()
                            ? static_cast<int>(std::max<int64_t>(-400, std::min<int64_t>(400, precision_arg->AsInt())))
                            : 0;
  const Value* method_arg = args.Get(1, "method");
  const std::string method = method_arg != nullptr ? method_arg->Str() : "common";
  if (!input.is_number()) {
    if (input.is_undefined()) return UndefinedError(input);
    return absl::InvalidArgumentError(absl::StrCat("type ", input.TypeName(), " doesn't define __round__ method"));
  }
  if (method == "common") {
    if (!input.is_float()) return Value::Int(input.AsInt());
    return Value::Float(PyRound(input.AsFloat(), precision));
  }
  if (method != "ceil" && method != "floor") return absl::InvalidArgumentError("method must be common, ceil or floor");
  const double scale = std::pow(10.0, precision);
  const double scaled = input.AsFloat() * scale;
  return Value::Float((method == "ceil" ? std::ceil(scaled) : std::floor(scaled)) / scale);
}

absl::StatusOr<Value> Escape(Renderer&, const Value& input, const CallArgs&) {
  std::string out;
  for (char c : input.Str()) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return Value::String(std::move(out));
}

absl::StatusOr<Value> Safe(Renderer&, const Value& input, const CallArgs&) {
  return input.is_string() ? input : Value::String(input.Str());
}

// jinja2's indent: the first line and blank lines stay unindented unless asked.
absl::StatusOr<Value> Indent(Renderer& renderer, const Value& input, const CallArgs& args) {
  std::string indention = "    ";
  if (const Value* width = args.Get(0, "width")) {
    if (width->is_string()) indention = width->AsString();
    else if (width->is_int()) indention = std::string(std::max<int64_t>(0, std::min<int64_t>(width->AsInt(), 10000)), ' ');
  }
  const bool first = ArgTruthy(args, 1, "first", false);
  const bool blank = ArgTruthy(args, 2, "blank", false);
  const std::vector<std::string> lines = PySplitLines(input.Str() + "\n", false);
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) {
      out += "\n";
      if (blank || !lines[i].empty()) out += indention;
    }
    out += lines[i];
    TPSERVE_RETURN_IF_ERROR(renderer.CheckSize(out.size()));
  }
  if (first) out = indention + out;
  return Value::String(std::move(out));
}

absl::StatusOr<Value> Center(Renderer& renderer, const Value& input, const CallArgs& args) {
  CallArgs method;
  const Value* width = args.Get(0, "width");
  method.positional.push_back(width != nullptr ? *width : Value::Int(80));
  return renderer.CallValue(GetAttribute(Value::String(input.Str()), "center"), std::move(method));
}

absl::StatusOr<Value> Truncate(Renderer&, const Value& input, const CallArgs& args) {
  const Value* length_arg = args.Get(0, "length");
  const int64_t length = length_arg != nullptr && length_arg->is_int() ? length_arg->AsInt() : 255;
  const bool killwords = ArgTruthy(args, 1, "killwords", false);
  const Value* end_arg = args.Get(2, "end");
  const std::string end = end_arg != nullptr ? end_arg->Str() : "...";
  const Value* leeway_arg = args.Get(3, "leeway");
  const int64_t leeway = leeway_arg != nullptr && leeway_arg->is_int() ? leeway_arg->AsInt() : 5;
  const int64_t end_len = static_cast<int64_t>(CodePointCount(end));
  if (length < end_len) return absl::InvalidArgumentError(absl::StrCat("expected length >= ", end_len, ", got ", length));
  const std::string text = input.Str();
  const std::vector<std::string_view> chars = SplitCodePoints(text);
  if (static_cast<int64_t>(chars.size()) <= length + leeway) return Value::String(text);
  std::string head;
  for (int64_t i = 0; i < length - end_len; ++i) head += chars[i];
  if (!killwords) {
    const size_t space = head.rfind(' ');
    if (space != std::string::npos) head.resize(space);
  }
  return Value::String(head + end);
}

absl::StatusOr<Value> WordCount(Renderer&, const Value& input, const CallArgs&) {
  const std::string text = input.Str();
  int64_t words = 0;
  bool in_word = false;
  size_t pos = 0;
  while (pos < text.size()) {
    const char32_t cp = NextCodePoint(text, &pos);
    const bool word_char = IsPyAlnum(cp) || cp == '_';
    if (word_char && !in_word) ++words;
    in_word = word_char;
  }
  return Value::Int(words);
}

absl::StatusOr<Value> Format(Renderer& renderer, const Value& input, const CallArgs& args) {
  if (!args.positional.empty() && !args.named.empty()) {
    return absl::InvalidArgumentError("can't handle positional and keyword arguments at the same time");
  }
  Value format_args;
  if (!args.named.empty()) {
    ValueMap map;
    for (const auto& [key, value] : args.named) map.Set(Value::String(key), value);
    format_args = Value::Dict(std::move(map));
  } else {
    format_args = Value::Tuple(args.positional);
  }
  return PercentFormat(input.Str(), format_args, renderer.options().max_output_bytes);
}

absl::StatusOr<Value> Attr(Renderer&, const Value& input, const CallArgs& args) {
  const Value* name = args.Get(0, "name");
  if (name == nullptr) return absl::InvalidArgumentError("attr() needs a name");
  // getattr only: unlike "x.name", no fallback to the item of that name.
  const std::string attr = name->Str();
  if (input.is_namespace()) {
    if (const Value* found = input.AsMap().Find(attr)) return *found;
  } else if (HasMethod(input, attr) && (attr.empty() || attr[0] != '_')) {
    return BindMethod(input, attr);
  }
  return Value::Undefined(absl::StrCat(ObjectTypeRepr(input), " has no attribute '", attr, "'"));
}

struct Filter {
  std::string_view name;
  FilterFn fn;
};

constexpr Filter kFilters[] = {
    {"default", Default}, {"d", Default}, {"upper", Upper}, {"lower", Lower}, {"title", Title},
    {"capitalize", Capitalize}, {"trim", Trim}, {"replace", Replace}, {"tojson", ToJson},
    {"string", String}, {"int", Int}, {"float", Float}, {"abs", Abs}, {"round", Round},
    {"escape", Escape}, {"e", Escape}, {"forceescape", Escape}, {"safe", Safe},
    {"indent", Indent}, {"center", Center}, {"truncate", Truncate}, {"wordcount", WordCount},
    {"format", Format}, {"attr", Attr},
};

}  // namespace

FilterFn FindFilter(std::string_view name) {
  for (const Filter& f : kFilters) {
    if (f.name == name) return f.fn;
  }
  return FindSequenceFilter(name);
}

}  // namespace tpserve::jinja
