#include "jinja/globals.h"

#include <ctime>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "jinja/renderer.h"

namespace tpserve::jinja {
namespace {

// jinja2's sandbox refuses ranges longer than this.
constexpr int64_t kMaxRange = 100000;

using GlobalFn = absl::StatusOr<Value> (*)(Renderer&, const CallArgs&);

class Builtin : public Callable {
 public:
  Builtin(std::string_view name, GlobalFn fn) : name_(name), fn_(fn) {}
  absl::StatusOr<Value> Call(Renderer& renderer, CallArgs args) const override { return fn_(renderer, args); }
  std::string Describe() const override { return absl::StrCat("<function ", std::string(name_), ">"); }

 private:
  std::string_view name_;
  GlobalFn fn_;
};

absl::StatusOr<int64_t> IntArg(const Value& v) {
  if (!v.is_int() && !v.is_bool()) {
    return absl::InvalidArgumentError(absl::StrCat("'", v.TypeName(), "' object cannot be interpreted as an integer"));
  }
  return v.AsInt();
}

absl::StatusOr<Value> Range(Renderer& renderer, const CallArgs& args) {
  const ValueList& a = args.positional;
  if (a.empty() || a.size() > 3) return absl::InvalidArgumentError("range expected 1 to 3 arguments");
  int64_t start = 0, stop = 0, step = 1;
  if (a.size() == 1) {
    TPSERVE_ASSIGN_OR_RETURN(stop, IntArg(a[0]));
  } else {
    TPSERVE_ASSIGN_OR_RETURN(start, IntArg(a[0]));
    TPSERVE_ASSIGN_OR_RETURN(stop, IntArg(a[1]));
    if (a.size() == 3) {
      TPSERVE_ASSIGN_OR_RETURN(step, IntArg(a[2]));
    }
  }
  if (step == 0) return absl::InvalidArgumentError("range() arg 3 must not be zero");
  const long double span = step > 0 ? static_cast<long double>(stop) - start : static_cast<long double>(start) - stop;
  const long double count = span <= 0 ? 0 : (span + (step > 0 ? step : -step) - 1) / (step > 0 ? step : -static_cast<long double>(step));
  if (count > kMaxRange) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Range too big. The sandbox blocks ranges larger than MAX_RANGE (", kMaxRange, ")."));
  }
  TPSERVE_RETURN_IF_ERROR(renderer.Charge(static_cast<int64_t>(count)));
  ValueList items;
  for (int64_t i = 0; i < static_cast<int64_t>(count); ++i) items.push_back(Value::Int(start + i * step));
  return Value::List(std::move(items));
}

absl::StatusOr<ValueMap> KeywordMap(const CallArgs& args, bool is_namespace) {
  ValueMap map;
  if (!args.positional.empty()) {
    const Value& first = args.positional[0];
    if (args.positional.size() > 1 || !first.is_dict()) {
      return absl::InvalidArgumentError("expected a single mapping argument");
    }
    map = first.AsMap();
  }
  for (const auto& [key, value] : args.named) map.Set(Value::String(key), value);
  for (const auto& [key, value] : map.entries()) {
    if (!is_namespace) continue;
    if (key.is_string() && !key.AsString().empty() && key.AsString()[0] == '_') {
      return absl::InvalidArgumentError(absl::StrCat(
          "Chat templates cannot store underscore-prefixed attributes on a namespace, but got ",
          key.Repr(), ". Please rename the attribute."));
    }
    if (value.holds_namespace()) return absl::InvalidArgumentError("a namespace attribute cannot hold a namespace");
  }
  return map;
}

absl::StatusOr<Value> Namespace(Renderer&, const CallArgs& args) {
  TPSERVE_ASSIGN_OR_RETURN(ValueMap map, KeywordMap(args, true));
  return Value::Namespace(std::move(map));
}

absl::StatusOr<Value> Dict(Renderer&, const CallArgs& args) {
  TPSERVE_ASSIGN_OR_RETURN(ValueMap map, KeywordMap(args, false));
  return Value::Dict(std::move(map));
}

absl::StatusOr<Value> RaiseException(Renderer&, const CallArgs& args) {
  const Value* message = args.Get(0, "message");
  return absl::InvalidArgumentError(message != nullptr ? message->Str() : "");
}

absl::StatusOr<Value> StrftimeNow(Renderer& renderer, const CallArgs& args) {
  const Value* format = args.Get(0, "format");
  if (format == nullptr || !format->is_string()) return absl::InvalidArgumentError("strftime_now needs a format string");
  const absl::Time now = renderer.options().now ? renderer.options().now() : absl::Now();
  return Value::String(PyStrftime(format->AsString(), now, absl::LocalTimeZone()));
}

const ValueMap& Globals() {
  static const ValueMap* globals = [] {
    auto* map = new ValueMap();
    auto add = [map](std::string_view name, GlobalFn fn) {
      map->Set(Value::String(std::string(name)), Value::Function(std::make_shared<Builtin>(name, fn)));
    };
    add("range", Range);
    add("namespace", Namespace);
    add("dict", Dict);
    add("raise_exception", RaiseException);
    add("strftime_now", StrftimeNow);
    return map;
  }();
  return *globals;
}

}  // namespace

const Value* FindGlobal(std::string_view name) { return Globals().Find(name); }

std::string PyStrftime(std::string_view format, absl::Time time, absl::TimeZone zone) {
  const absl::TimeZone::CivilInfo info = zone.At(time);
  std::tm tm{};
  tm.tm_year = static_cast<int>(info.cs.year() - 1900);
  tm.tm_mon = info.cs.month() - 1;
  tm.tm_mday = info.cs.day();
  tm.tm_hour = info.cs.hour();
  tm.tm_min = info.cs.minute();
  tm.tm_sec = info.cs.second();
  const int weekday = static_cast<int>(absl::GetWeekday(absl::CivilDay(info.cs)));  // Monday 0
  tm.tm_wday = (weekday + 1) % 7;  // Sunday 0
  tm.tm_yday = absl::GetYearDay(absl::CivilDay(info.cs)) - 1;
  tm.tm_isdst = info.is_dst ? 1 : 0;
  tm.tm_gmtoff = info.offset;
  tm.tm_zone = info.zone_abbr;
  std::string out;
  // Directive by directive, so that a format of any length works.
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%' || i + 1 >= format.size()) {
      out.push_back(format[i]);
      continue;
    }
    size_t end = i + 1;
    while (end < format.size() && (format[end] == '-' || format[end] == '#' || format[end] == 'E' || format[end] == 'O')) ++end;
    const std::string directive(format.substr(i, end - i + 1));
    char buf[256];
    const size_t n = std::strftime(buf, sizeof(buf), directive.c_str(), &tm);
    out.append(buf, n);
    i = end;
  }
  return out;
}

}  // namespace tpserve::jinja
