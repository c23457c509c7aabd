#include "jinja/string_format.h"

#include <cmath>
#include <cstdio>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/utf8.h"
#include "jinja/operators.h"
#include "jinja/unicode.h"

namespace tpserve::jinja {
namespace {

constexpr int kMaxWidth = 10000;

struct Spec {
  char fill = ' ';
  char align = '\0';  // '<', '>', '^', '=' or none
  char sign = '-';
  bool alternate = false;
  bool zero = false;
  int width = 0;
  int precision = -1;
  char type = '\0';
};

std::string Pad(std::string text, const Spec& spec, char default_align) {
  const size_t len = CodePointCount(text);
  if (spec.width <= 0 || len >= static_cast<size_t>(spec.width)) return text;
  const size_t pad = spec.width - len;
  const char align = spec.align != '\0' ? spec.align : default_align;
  const std::string fill(1, spec.fill);
  auto repeat = [&fill](size_t n) {
    std::string s;
    for (size_t i = 0; i < n; ++i) s += fill;
    return s;
  };
  if (align == '<') return text + repeat(pad);
  if (align == '^') return repeat(pad / 2) + text + repeat(pad - pad / 2);
  if (align == '=' && !text.empty() && (text[0] == '-' || text[0] == '+' || text[0] == ' ')) {
    return text.substr(0, 1) + repeat(pad) + text.substr(1);
  }
  return repeat(pad) + text;
}

// A number per printf conversion `type` (d, x, X, o, f, F, e, E, g, G).
absl::StatusOr<std::string> FormatNumber(const Value& v, const Spec& spec) {
  if (!v.is_number()) {
    if (v.is_undefined()) return UndefinedError(v);
    return absl::InvalidArgumentError(absl::StrCat("%", std::string(1, spec.type),
                                                   " format: a real number is required, not ",
                                                   v.TypeName()));
  }
  std::string flags;
  if (spec.sign == '+' || spec.sign == ' ') flags.push_back(spec.sign);
  if (spec.alternate) flags.push_back('#');
  char buf[512];
  const bool integral = spec.type == 'd' || spec.type == 'x' || spec.type == 'X' || spec.type == 'o';
  if (integral) {
    if (v.is_float() && !std::isfinite(v.AsFloat())) {
      return absl::InvalidArgumentError("cannot convert float infinity or NaN to integer");
    }
    const int64_t i = v.is_float() ? static_cast<int64_t>(v.AsFloat()) : v.AsInt();
    const std::string conv = spec.type == 'd' ? "lld" : std::string("ll") + spec.type;
    std::snprintf(buf, sizeof(buf), ("%" + flags + conv).c_str(), static_cast<long long>(i));
  } else {
    const int precision = spec.precision < 0 ? 6 : std::min(spec.precision, 300);
    std::snprintf(buf, sizeof(buf), ("%" + flags + "." + std::to_string(precision) + spec.type).c_str(),
                  v.AsFloat());
  }
  return std::string(buf);
}

// `printf`: "%" formatting, where everything aligns right unless "-".
absl::StatusOr<std::string> FormatOne(const Value& v, Spec spec, bool printf) {
  const char text_align = printf ? '>' : '<';
  switch (spec.type) {
    case 's': case '\0': {
      std::string text = v.Str();
      if (spec.precision >= 0) {
        std::vector<std::string_view> chars = SplitCodePoints(text);
        if (chars.size() > static_cast<size_t>(spec.precision)) {
          std::string cut;
          for (int i = 0; i < spec.precision; ++i) cut += chars[i];
          text = cut;
        }
      }
      return Pad(text, spec, v.is_number() && spec.type == '\0' ? '>' : text_align);
    }
    case 'r': return Pad(v.Repr(), spec, text_align);
    case 'c': {
      if (v.is_string()) return Pad(v.AsString(), spec, text_align);
      std::string out;
      AppendUtf8(static_cast<char32_t>(v.AsInt() & 0x1FFFFF), &out);
      return Pad(out, spec, text_align);
    }
    case 'i': case 'u': spec.type = 'd'; [[fallthrough]];
    default: {
      static constexpr std::string_view kTypes = "dxXofFeEgG";
      if (kTypes.find(spec.type) == std::string_view::npos) {
        return absl::InvalidArgumentError(absl::StrCat("unsupported format character '",
                                                       std::string(1, spec.type), "'"));
      }
      TPSERVE_ASSIGN_OR_RETURN(std::string text, FormatNumber(v, spec));
      if (spec.zero && spec.align == '\0') {
        spec.fill = '0';
        spec.align = '=';
      }
      return Pad(text, spec, '>');
    }
  }
}

// Reads digits at format[*i] (capped), or -1 if there are none.
int ReadNumber(std::string_view format, size_t* i) {
  int n = -1;
  while (*i < format.size() && absl::ascii_isdigit(format[*i])) {
    n = std::min(kMaxWidth, std::max(n, 0) * 10 + (format[*i] - '0'));
    ++*i;
  }
  return n;
}

}  // namespace

absl::StatusOr<Value> PercentFormat(std::string_view format, const Value& args, size_t max_bytes) {
  const bool mapping = args.is_dict();
  ValueList positional = args.kind() == Value::Kind::kTuple ? args.AsList() : ValueList{args};
  size_t next = 0;
  bool used_mapping = false;
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out.push_back(format[i]);
      continue;
    }
    if (++i >= format.size()) return absl::InvalidArgumentError("incomplete format");
    if (format[i] == '%') {
      out.push_back('%');
      continue;
    }
    const Value* arg = nullptr;
    Value keyed;
    if (format[i] == '(') {
      const size_t close = format.find(')', i);
      if (close == std::string_view::npos) return absl::InvalidArgumentError("incomplete format key");
      if (!mapping) return absl::InvalidArgumentError("format requires a mapping");
      const Value* found = args.AsMap().Find(format.substr(i + 1, close - i - 1));
      if (found == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat("KeyError: '", std::string(format.substr(i + 1, close - i - 1)), "'"));
      }
      keyed = *found;
      arg = &keyed;
      used_mapping = true;
      i = close + 1;
    }
    Spec spec;
    for (; i < format.size() && std::string_view("-+ #0").find(format[i]) != std::string_view::npos; ++i) {
      if (format[i] == '-') spec.align = '<';
      else if (format[i] == '0') spec.zero = true;
      else if (format[i] == '#') spec.alternate = true;
      else if (spec.sign != '+') spec.sign = format[i];
    }
    spec.width = std::max(0, ReadNumber(format, &i));
    if (i < format.size() && format[i] == '.') {
      ++i;
      spec.precision = std::max(0, ReadNumber(format, &i));
    }
    if (i >= format.size()) return absl::InvalidArgumentError("incomplete format");
    spec.type = format[i];
    if (spec.align == '<') spec.zero = false;
    if (arg == nullptr) {
      if (next >= positional.size()) return absl::InvalidArgumentError("not enough arguments for format string");
      arg = &positional[next++];
    }
    TPSERVE_ASSIGN_OR_RETURN(std::string piece, FormatOne(*arg, spec, true));
    out += piece;
    if (out.size() > max_bytes) return absl::InvalidArgumentError("formatted string is too long");
  }
  if (!used_mapping && !mapping && next < positional.size()) {
    return absl::InvalidArgumentError("not all arguments converted during string formatting");
  }
  return Value::String(std::move(out));
}

absl::StatusOr<Value> BraceFormat(std::string_view format, const CallArgs& args, size_t max_bytes) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < format.size(); ++i) {
    const char c = format[i];
    if (c == '}') {
      if (i + 1 < format.size() && format[i + 1] == '}') ++i;
      else return absl::InvalidArgumentError("Single '}' encountered in format string");
      out.push_back('}');
      continue;
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < format.size() && format[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    const size_t close = format.find('}', i);
    if (close == std::string_view::npos) return absl::InvalidArgumentError("expected '}' before end of string");
    std::string_view field = format.substr(i + 1, close - i - 1);
    i = close;
    std::string_view spec_text;
    if (const size_t colon = field.find(':'); colon != std::string_view::npos) {
      spec_text = field.substr(colon + 1);
      field = field.substr(0, colon);
    }
    char conversion = '\0';
    if (field.size() >= 2 && field[field.size() - 2] == '!') {
      conversion = field.back();
      field.remove_suffix(2);
    }
    const Value* arg = nullptr;
    int index = 0;
    if (field.empty()) {
      arg = auto_index < args.positional.size() ? &args.positional[auto_index] : nullptr;
      ++auto_index;
    } else if (absl::SimpleAtoi(std::string(field), &index)) {
      arg = index >= 0 && static_cast<size_t>(index) < args.positional.size() ? &args.positional[index] : nullptr;
    } else {
      for (const auto& [key, value] : args.named) {
        if (key == field) arg = &value;
      }
    }
    if (arg == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("format field '", std::string(field), "' has no argument"));
    }
    Spec spec;
    size_t k = 0;
    if (spec_text.size() >= 2 && std::string_view("<>^=").find(spec_text[1]) != std::string_view::npos) {
      spec.fill = spec_text[0];
      spec.align = spec_text[1];
      k = 2;
    } else if (!spec_text.empty() && std::string_view("<>^=").find(spec_text[0]) != std::string_view::npos) {
      spec.align = spec_text[0];
      k = 1;
    }
    if (k < spec_text.size() && (spec_text[k] == '+' || spec_text[k] == '-' || spec_text[k] == ' ')) {
      spec.sign = spec_text[k++];
    }
    if (k < spec_text.size() && spec_text[k] == '0') {
      spec.zero = true;
      ++k;
    }
    spec.width = std::max(0, ReadNumber(spec_text, &k));
    if (k < spec_text.size() && spec_text[k] == '.') {
      ++k;
      spec.precision = std::max(0, ReadNumber(spec_text, &k));
    }
    if (k < spec_text.size()) spec.type = spec_text[k];
    Value shown = *arg;
    if (conversion == 'r') shown = Value::String(arg->Repr());
    else if (conversion == 's') shown = Value::String(arg->Str());
    if (spec.type == '\0' && shown.is_float() && spec.precision >= 0) spec.type = 'g';
    TPSERVE_ASSIGN_OR_RETURN(std::string piece, FormatOne(shown, spec, false));
    out += piece;
    if (out.size() > max_bytes) return absl::InvalidArgumentError("formatted string is too long");
  }
  return Value::String(std::move(out));
}

}  // namespace tpserve::jinja
