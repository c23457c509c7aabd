#include "jinja/predicates.h"

#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "jinja/operators.h"
#include "jinja/unicode.h"

namespace tpserve::jinja {
namespace {

absl::StatusOr<Value> Arg(const CallArgs& args, std::string_view test) {
  if (args.positional.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("test '", std::string(test), "' needs an argument"));
  }
  return args.positional[0];
}

absl::StatusOr<bool> Defined(const Value& v, const CallArgs&) { return !v.is_undefined(); }
absl::StatusOr<bool> Undefined(const Value& v, const CallArgs&) { return v.is_undefined(); }
absl::StatusOr<bool> None(const Value& v, const CallArgs&) { return v.is_none(); }
absl::StatusOr<bool> Boolean(const Value& v, const CallArgs&) { return v.is_bool(); }
absl::StatusOr<bool> True(const Value& v, const CallArgs&) { return v.is_bool() && v.AsBool(); }
absl::StatusOr<bool> False(const Value& v, const CallArgs&) { return v.is_bool() && !v.AsBool(); }
absl::StatusOr<bool> Integer(const Value& v, const CallArgs&) { return v.is_int(); }
absl::StatusOr<bool> Float(const Value& v, const CallArgs&) { return v.is_float(); }
absl::StatusOr<bool> Number(const Value& v, const CallArgs&) { return v.is_number(); }
absl::StatusOr<bool> String(const Value& v, const CallArgs&) { return v.is_string(); }
absl::StatusOr<bool> Mapping(const Value& v, const CallArgs&) { return v.is_dict(); }
absl::StatusOr<bool> Iterable(const Value& v, const CallArgs&) {
  return v.is_string() || v.is_sequence() || v.is_dict() || v.is_undefined();
}
absl::StatusOr<bool> Sequence(const Value& v, const CallArgs&) {
  return v.is_string() || v.is_sequence() || v.is_dict() || v.is_undefined();
}
absl::StatusOr<bool> IsCallable(const Value& v, const CallArgs&) {
  return v.is_callable() || v.is_undefined();
}

template <int kRemainder>
absl::StatusOr<bool> Parity(const Value& v, const CallArgs&) {
  if (!v.is_int() && !v.is_bool()) {
    if (v.is_undefined()) return UndefinedError(v);
    return absl::InvalidArgumentError(absl::StrCat("unsupported operand type(s) for %: '", v.TypeName(), "' and 'int'"));
  }
  return ((v.AsInt() % 2) + 2) % 2 == kRemainder;
}

absl::StatusOr<bool> DivisibleBy(const Value& v, const CallArgs& args) {
  absl::StatusOr<Value> num = Arg(args, "divisibleby");
  if (!num.ok()) return num.status();
  absl::StatusOr<Value> rem = BinaryOperation("%", v, *num, 0);
  if (!rem.ok()) return rem.status();
  return !rem->Truthy();
}

template <const char* kOp>
absl::StatusOr<bool> Compare(const Value& v, const CallArgs& args) {
  absl::StatusOr<Value> other = Arg(args, kOp);
  if (!other.ok()) return other.status();
  return Comparison(kOp, v, *other);
}

absl::StatusOr<bool> In(const Value& v, const CallArgs& args) {
  absl::StatusOr<Value> seq = Arg(args, "in");
  if (!seq.ok()) return seq.status();
  return Comparison("in", v, *seq);
}

// Python's "is": the same object. Singletons, equal small ints and shared
// containers are; other values (fresh per evaluation) are not.
absl::StatusOr<bool> SameAs(const Value& v, const CallArgs& args) {
  absl::StatusOr<Value> other = Arg(args, "sameas");
  if (!other.ok()) return other.status();
  if (v.kind() != other->kind()) return false;
  switch (v.kind()) {
    case Value::Kind::kNone: return true;
    case Value::Kind::kBool: return v.AsBool() == other->AsBool();
    case Value::Kind::kInt: return v.AsInt() == other->AsInt() && v.AsInt() >= -5 && v.AsInt() <= 256;
    case Value::Kind::kList: case Value::Kind::kTuple: return &v.AsList() == &other->AsList();
    case Value::Kind::kDict: case Value::Kind::kNamespace: return &v.AsMap() == &other->AsMap();
    case Value::Kind::kCallable: return &v.AsCallable() == &other->AsCallable();
    default: return false;
  }
}

template <bool kUpper>
absl::StatusOr<bool> Case(const Value& v, const CallArgs&) {
  const std::string text = v.Str();
  bool cased = false;
  size_t pos = 0;
  while (pos < text.size()) {
    const char32_t cp = NextCodePoint(text, &pos);
    if (kUpper ? IsPyLower(cp) : IsPyUpper(cp)) return false;
    cased = cased || (kUpper ? IsPyUpper(cp) : IsPyLower(cp));
  }
  return cased;
}

constexpr char kEq[] = "==";
constexpr char kNe[] = "!=";
constexpr char kLt[] = "<";
constexpr char kLe[] = "<=";
constexpr char kGt[] = ">";
constexpr char kGe[] = ">=";

struct Test {
  std::string_view name;
  TestFn fn;
};

constexpr Test kTests[] = {
    {"defined", Defined}, {"undefined", Undefined}, {"none", None}, {"boolean", Boolean},
    {"true", True}, {"false", False}, {"integer", Integer}, {"float", Float}, {"number", Number},
    {"string", String}, {"mapping", Mapping}, {"iterable", Iterable}, {"sequence", Sequence},
    {"callable", IsCallable}, {"odd", Parity<1>}, {"even", Parity<0>},
    {"divisibleby", DivisibleBy}, {"eq", Compare<kEq>}, {"equalto", Compare<kEq>},
    {"==", Compare<kEq>}, {"ne", Compare<kNe>}, {"!=", Compare<kNe>}, {"lt", Compare<kLt>},
    {"lessthan", Compare<kLt>}, {"<", Compare<kLt>}, {"le", Compare<kLe>}, {"<=", Compare<kLe>},
    {"gt", Compare<kGt>}, {"greaterthan", Compare<kGt>}, {">", Compare<kGt>},
    {"ge", Compare<kGe>}, {">=", Compare<kGe>}, {"in", In}, {"sameas", SameAs},
    {"upper", Case<true>}, {"lower", Case<false>},
};

}  // namespace

TestFn FindTest(std::string_view name) {
  for (const Test& t : kTests) {
    if (t.name == name) return t.fn;
  }
  return nullptr;
}

}  // namespace tpserve::jinja
