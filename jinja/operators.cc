#include "jinja/operators.h"

#include <cmath>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "jinja/methods.h"
#include "jinja/string_format.h"
#include "jinja/unicode.h"

namespace tpserve::jinja {
namespace {

absl::Status TypeError(std::string_view op, const Value& a, const Value& b) {
  return absl::InvalidArgumentError(absl::StrCat("unsupported operand type(s) for ", std::string(op), ": '",
                                                 a.TypeName(), "' and '", b.TypeName(), "'"));
}

absl::Status Overflow() { return absl::InvalidArgumentError("integer overflow"); }

absl::StatusOr<Value> Repeat(const Value& seq, int64_t times, size_t max_bytes) {
  const bool tuple = seq.kind() == Value::Kind::kTuple;
  if (times <= 0) return seq.is_string() ? Value::String("") : tuple ? Value::Tuple({}) : Value::List({});
  const size_t unit = seq.is_string() ? seq.AsString().size() : seq.AsList().size() * 16;
  if (unit > 0 && static_cast<uint64_t>(times) > max_bytes / unit) {
    return absl::InvalidArgumentError(absl::StrCat("result exceeds ", max_bytes, " bytes"));
  }
  if (seq.is_string()) {
    std::string out;
    out.reserve(unit * times);
    for (int64_t i = 0; i < times; ++i) out += seq.AsString();
    return Value::String(std::move(out));
  }
  ValueList items;
  for (int64_t i = 0; i < times; ++i) {
    items.insert(items.end(), seq.AsList().begin(), seq.AsList().end());
  }
  return tuple ? Value::Tuple(std::move(items)) : Value::List(std::move(items));
}

// CPython's float_divmod.
std::pair<double, double> FloatDivMod(double a, double b) {
  double mod = std::fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0) {
    if ((b < 0) != (mod < 0)) {
      mod += b;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, b);
  }
  double floordiv;
  if (div != 0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, a / b);
  }
  return {floordiv, mod};
}

absl::StatusOr<Value> IntPower(int64_t base, int64_t exp) {
  if (exp < 0) {
    if (base == 0) return absl::InvalidArgumentError("0.0 cannot be raised to a negative power");
    return Value::Float(std::pow(static_cast<double>(base), static_cast<double>(exp)));
  }
  int64_t result = 1;
  while (exp > 0) {
    if (exp & 1) {
      if (__builtin_mul_overflow(result, base, &result)) return Overflow();
    }
    exp >>= 1;
    if (exp > 0 && __builtin_mul_overflow(base, base, &base)) return Overflow();
  }
  return Value::Int(result);
}

absl::StatusOr<Value> Arithmetic(std::string_view op, const Value& a, const Value& b) {
  const bool as_float = a.is_float() || b.is_float();
  if (!as_float) {
    const int64_t x = a.AsInt();
    const int64_t y = b.AsInt();
    int64_t r = 0;
    if (op == "+") return __builtin_add_overflow(x, y, &r) ? absl::StatusOr<Value>(Overflow()) : Value::Int(r);
    if (op == "-") return __builtin_sub_overflow(x, y, &r) ? absl::StatusOr<Value>(Overflow()) : Value::Int(r);
    if (op == "*") return __builtin_mul_overflow(x, y, &r) ? absl::StatusOr<Value>(Overflow()) : Value::Int(r);
    if (op == "**") return IntPower(x, y);
    if (op == "//" || op == "%") {
      if (y == 0) return absl::InvalidArgumentError("integer division or modulo by zero");
      if (x == std::numeric_limits<int64_t>::min() && y == -1) return Overflow();
      int64_t q = x / y;
      int64_t m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        m += y;
        q -= 1;
      }
      return Value::Int(op == "//" ? q : m);
    }
  }
  const double x = a.AsFloat();
  const double y = b.AsFloat();
  if (op == "+") return Value::Float(x + y);
  if (op == "-") return Value::Float(x - y);
  if (op == "*") return Value::Float(x * y);
  if (op == "/") {
    if (y == 0) return absl::InvalidArgumentError(as_float ? "float division by zero" : "division by zero");
    return Value::Float(x / y);
  }
  if (op == "//" || op == "%") {
    if (y == 0) return absl::InvalidArgumentError(op == "%" ? "float modulo" : "float floor division by zero");
    const auto [div, mod] = FloatDivMod(x, y);
    return Value::Float(op == "//" ? div : mod);
  }
  if (op == "**") {
    if (x == 0 && y < 0) return absl::InvalidArgumentError("0.0 cannot be raised to a negative power");
    if (x < 0 && y != std::floor(y)) return absl::InvalidArgumentError("complex results are not supported");
    return Value::Float(std::pow(x, y));
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown operator ", std::string(op)));
}

bool IsMutatingMethod(std::string_view name) {
  static constexpr std::string_view kNames[] = {
      "append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse", "update",
      "popitem", "setdefault", "add", "discard", "difference_update", "intersection_update",
      "symmetric_difference_update"};
  for (std::string_view n : kNames) {
    if (n == name) return true;
  }
  return false;
}

// Python's index into a sequence of `size`, or nullopt when out of range.
std::optional<size_t> NormalizeIndex(int64_t index, size_t size) {
  if (index < 0) index += static_cast<int64_t>(size);
  if (index < 0 || static_cast<uint64_t>(index) >= size) return std::nullopt;
  return static_cast<size_t>(index);
}

Value MissingAttribute(const Value& obj, std::string_view name) {
  return Value::Undefined(absl::StrCat(ObjectTypeRepr(obj), " has no attribute '", std::string(name), "'"));
}

// obj[key] without the attribute fallback; nullopt when Python's [] raises.
std::optional<Value> LookupItem(const Value& obj, const Value& key) {
  if (obj.is_dict() || obj.is_namespace()) {
    if (obj.is_namespace()) return std::nullopt;
    const Value* found = obj.AsMap().Find(key);
    if (found != nullptr) return *found;
    return std::nullopt;
  }
  if (!key.is_int() && !key.is_bool()) return std::nullopt;
  if (obj.is_sequence()) {
    const auto index = NormalizeIndex(key.AsInt(), obj.AsList().size());
    if (!index) return std::nullopt;
    return obj.AsList()[*index];
  }
  if (obj.is_string()) {
    const std::vector<std::string_view> chars = SplitCodePoints(obj.AsString());
    const auto index = NormalizeIndex(key.AsInt(), chars.size());
    if (!index) return std::nullopt;
    return Value::String(std::string(chars[*index]));
  }
  return std::nullopt;
}

// getattr(obj, name) without the item fallback.
std::optional<Value> LookupAttribute(const Value& obj, std::string_view name) {
  if (obj.is_namespace()) {
    const Value* found = obj.AsMap().Find(name);
    if (found != nullptr) return *found;
    return std::nullopt;
  }
  if ((obj.is_sequence() || obj.is_dict()) && IsMutatingMethod(name)) {
    return Value::Undefined(absl::StrCat("access to attribute '", std::string(name), "' of '", obj.TypeName(),
                                         "' object is unsafe."));
  }
  if (HasMethod(obj, name)) return BindMethod(obj, std::string(name));
  // The (grouper, list) pairs groupby returns are named tuples in jinja2.
  if (obj.kind() == Value::Kind::kTuple && obj.AsList().size() == 2) {
    if (name == "grouper") return obj.AsList()[0];
    if (name == "list") return obj.AsList()[1];
  }
  return std::nullopt;
}

}  // namespace

std::string ObjectTypeRepr(const Value& v) {
  if (v.is_none()) return "'None'";
  if (v.is_namespace()) return "'transformers.utils.chat_template_utils.TemplateNamespace object'";
  if (v.is_undefined()) return "'jinja2.runtime.Undefined object'";
  return absl::StrCat("'", v.TypeName(), " object'");
}

absl::Status UndefinedError(const Value& undefined) {
  const std::string& hint = undefined.AsString();
  return absl::InvalidArgumentError(hint.empty() ? "value is undefined" : hint);
}

absl::StatusOr<Value> BinaryOperation(std::string_view op, const Value& a, const Value& b,
                                      size_t max_bytes) {
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  if (a.is_number() && b.is_number()) return Arithmetic(op, a, b);
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      if (a.AsString().size() + b.AsString().size() > max_bytes) {
        return absl::InvalidArgumentError(absl::StrCat("result exceeds ", max_bytes, " bytes"));
      }
      return Value::String(a.AsString() + b.AsString());
    }
    if (a.is_sequence() && a.kind() == b.kind()) {
      if ((a.AsList().size() + b.AsList().size()) * 16 > max_bytes) {
        return absl::InvalidArgumentError(absl::StrCat("result exceeds ", max_bytes, " bytes"));
      }
      ValueList items = a.AsList();
      items.insert(items.end(), b.AsList().begin(), b.AsList().end());
      return a.kind() == Value::Kind::kTuple ? Value::Tuple(std::move(items)) : Value::List(std::move(items));
    }
    if (a.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("can only concatenate str (not \"", b.TypeName(), "\") to str"));
    }
  }
  if (op == "*") {
    if ((a.is_string() || a.is_sequence()) && (b.is_int() || b.is_bool())) return Repeat(a, b.AsInt(), max_bytes);
    if ((b.is_string() || b.is_sequence()) && (a.is_int() || a.is_bool())) return Repeat(b, a.AsInt(), max_bytes);
  }
  if (op == "%" && a.is_string()) return PercentFormat(a.AsString(), b, max_bytes);
  return TypeError(op, a, b);
}

absl::StatusOr<Value> UnaryOperation(std::string_view op, const Value& v) {
  if (v.is_undefined()) return UndefinedError(v);
  if (!v.is_number()) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad operand type for unary ", std::string(op), ": '", v.TypeName(), "'"));
  }
  if (op == "+") return v.is_float() ? v : Value::Int(v.AsInt());
  if (v.is_float()) return Value::Float(-v.AsFloat());
  if (v.AsInt() == std::numeric_limits<int64_t>::min()) return Overflow();
  return Value::Int(-v.AsInt());
}

absl::StatusOr<int> ThreeWayCompare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (!a.is_float() && !b.is_float()) return a.AsInt() < b.AsInt() ? -1 : a.AsInt() > b.AsInt();
    const double x = a.AsFloat();
    const double y = b.AsFloat();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.AsString().compare(b.AsString());
    return c < 0 ? -1 : c > 0;
  }
  if (a.is_sequence() && a.kind() == b.kind()) {
    const ValueList& x = a.AsList();
    const ValueList& y = b.AsList();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (PyEquals(x[i], y[i])) continue;
      return ThreeWayCompare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size();
  }
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  return absl::InvalidArgumentError(absl::StrCat("'<' not supported between instances of '",
                                                 a.TypeName(), "' and '", b.TypeName(), "'"));
}

absl::StatusOr<bool> Comparison(std::string_view op, const Value& a, const Value& b) {
  if (op == "==") return PyEquals(a, b);
  if (op == "!=") return !PyEquals(a, b);
  if (op == "in" || op == "notin") {
    bool found = false;
    if (b.is_string()) {
      if (a.is_undefined()) return UndefinedError(a);
      if (!a.is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "'in <string>' requires string as left operand, not ", a.TypeName()));
      }
      found = b.AsString().find(a.AsString()) != std::string::npos;
    } else if (b.is_sequence()) {
      for (const Value& item : b.AsList()) found = found || PyEquals(item, a);
    } else if (b.is_dict()) {
      found = b.AsMap().Find(a) != nullptr;
    } else if (!b.is_undefined()) {
      return absl::InvalidArgumentError(
          absl::StrCat("argument of type '", b.TypeName(), "' is not iterable"));
    }
    return op == "in" ? found : !found;
  }
  if (!((a.is_number() && b.is_number()) || (a.is_string() && b.is_string()) ||
        (a.is_sequence() && a.kind() == b.kind()))) {
    if (a.is_undefined()) return UndefinedError(a);
    if (b.is_undefined()) return UndefinedError(b);
    return absl::InvalidArgumentError(absl::StrCat("'", std::string(op), "' not supported between instances of '",
                                                   a.TypeName(), "' and '", b.TypeName(), "'"));
  }
  auto order = ThreeWayCompare(a, b);
  if (!order.ok()) return order.status();
  if (a.is_float() || b.is_float()) {
    if (std::isnan(a.AsFloat()) || std::isnan(b.AsFloat())) return false;
  }
  if (op == "<") return *order < 0;
  if (op == "<=") return *order <= 0;
  if (op == ">") return *order > 0;
  return *order >= 0;
}

absl::StatusOr<ValueList> Iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return ValueList{};
    case Value::Kind::kList: case Value::Kind::kTuple: return v.AsList();
    case Value::Kind::kDict: {
      ValueList keys;
      for (const auto& entry : v.AsMap().entries()) keys.push_back(entry.first);
      return keys;
    }
    case Value::Kind::kString: {
      ValueList chars;
      for (std::string_view c : SplitCodePoints(v.AsString())) chars.push_back(Value::String(std::string(c)));
      return chars;
    }
    default:
      return absl::InvalidArgumentError(absl::StrCat("'", v.TypeName(), "' object is not iterable"));
  }
}

Value GetAttribute(const Value& obj, std::string_view name) {
  if (obj.is_undefined()) return obj;  // the renderer reports it
  if (!name.empty() && name[0] == '_') {
    return Value::Undefined(absl::StrCat("access to attribute '", std::string(name), "' of ", ObjectTypeRepr(obj), " is unsafe."));
  }
  if (auto found = LookupAttribute(obj, name)) return *found;
  if (auto found = LookupItem(obj, Value::String(std::string(name)))) return *found;
  return MissingAttribute(obj, name);
}

Value GetItem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) return obj;
  if (auto found = LookupItem(obj, key)) return *found;
  if (key.is_string()) {
    if (!key.AsString().empty() && key.AsString()[0] == '_') return MissingAttribute(obj, key.AsString());
    if (auto found = LookupAttribute(obj, key.AsString())) return *found;
    return MissingAttribute(obj, key.AsString());
  }
  // jinja2 quotes the type for a missing attribute but not for a missing element.
  std::string type = ObjectTypeRepr(obj);
  if (type.size() >= 2 && type.front() == '\'') type = type.substr(1, type.size() - 2);
  return Value::Undefined(absl::StrCat(type, " has no element ", key.Repr()));
}

absl::StatusOr<Value> SliceOf(const Value& obj, std::optional<int64_t> start,
                              std::optional<int64_t> stop, std::optional<int64_t> step) {
  const int64_t st = step.value_or(1);
  if (st == 0) return absl::InvalidArgumentError("slice step cannot be zero");
  std::vector<std::string_view> chars;
  size_t size = 0;
  if (obj.is_string()) {
    chars = SplitCodePoints(obj.AsString());
    size = chars.size();
  } else if (obj.is_sequence()) {
    size = obj.AsList().size();
  } else {
    if (obj.is_undefined()) return UndefinedError(obj);
    return absl::InvalidArgumentError(absl::StrCat("'", obj.TypeName(), "' object is not subscriptable"));
  }
  const int64_t n = static_cast<int64_t>(size);
  auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) x += n;
    if (st > 0) return std::min(std::max<int64_t>(x, 0), n);
    return std::min(std::max<int64_t>(x, -1), n - 1);
  };
  const int64_t begin = clamp(start, st > 0 ? 0 : n - 1);
  const int64_t end = clamp(stop, st > 0 ? n : -1);
  std::string text;
  ValueList items;
  for (int64_t i = begin; st > 0 ? i < end : i > end;) {
    if (obj.is_string()) text += chars[i];
    else items.push_back(obj.AsList()[i]);
    if (__builtin_add_overflow(i, st, &i)) break;
  }
  if (obj.is_string()) return Value::String(std::move(text));
  return obj.kind() == Value::Kind::kTuple ? Value::Tuple(std::move(items)) : Value::List(std::move(items));
}

}  // namespace tpserve::jinja
