#include "jinja/methods.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "jinja/renderer.h"
#include "jinja/string_format.h"
#include "jinja/unicode.h"

namespace tpserve::jinja {
namespace {

using MethodFn = absl::StatusOr<Value> (*)(Renderer&, const Value&, const CallArgs&);

class BoundMethod : public Callable {
 public:
  BoundMethod(Value receiver, std::string name) : receiver_(std::move(receiver)), name_(std::move(name)) {}
  absl::StatusOr<Value> Call(Renderer& renderer, CallArgs args) const override {
    return CallMethod(renderer, receiver_, name_, args);
  }
  std::string Describe() const override {
    return absl::StrCat("<built-in method ", name_, " of ", receiver_.TypeName(), " object>");
  }
  bool holds_namespace() const override { return receiver_.holds_namespace(); }

 private:
  Value receiver_;
  std::string name_;
};

absl::StatusOr<std::string> StringArg(const CallArgs& args, size_t index, std::string_view name,
                                      std::string_view method) {
  const Value* v = args.Get(index, name);
  if (v == nullptr || !v->is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(
        std::string(method), "() argument must be str, not ", v == nullptr ? "nothing" : v->TypeName()));
  }
  return v->AsString();
}

// Optional chars argument of strip(): null for whitespace.
absl::StatusOr<const std::string*> CharsArg(const CallArgs& args) {
  const Value* v = args.Get(0, "chars");
  if (v == nullptr || v->is_none()) return nullptr;
  if (!v->is_string()) return absl::InvalidArgumentError("strip arg must be None or str");
  return &v->AsString();
}

template <bool kLeft, bool kRight>
absl::StatusOr<Value> Strip(Renderer&, const Value& s, const CallArgs& args) {
  TPSERVE_ASSIGN_OR_RETURN(const std::string* chars, CharsArg(args));
  return Value::String(std::string(PyStrip(s.AsString(), chars, kLeft, kRight)));
}

absl::StatusOr<int64_t> MaxSplit(const CallArgs& args) {
  const Value* v = args.Get(1, "maxsplit");
  if (v == nullptr) return -1;
  if (!v->is_int() && !v->is_bool()) return absl::InvalidArgumentError("maxsplit must be an integer");
  return v->AsInt();
}

ValueList SplitWhitespace(std::string_view s, int64_t maxsplit, bool from_right) {
  std::vector<size_t> starts;
  std::vector<char32_t> cps;
  size_t pos = 0;
  while (pos < s.size()) {
    starts.push_back(pos);
    cps.push_back(NextCodePoint(s, &pos));
  }
  starts.push_back(s.size());
  std::vector<std::pair<size_t, size_t>> words;  // code point ranges
  const size_t n = cps.size();
  if (!from_right) {
    size_t i = 0;
    while (i < n) {
      while (i < n && IsPySpace(cps[i])) ++i;
      if (i == n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(words.size()) == maxsplit) {
        size_t end = n;
        words.emplace_back(i, end);
        break;
      }
      size_t j = i;
      while (j < n && !IsPySpace(cps[j])) ++j;
      words.emplace_back(i, j);
      i = j;
    }
  } else {
    size_t i = n;
    while (i > 0) {
      while (i > 0 && IsPySpace(cps[i - 1])) --i;
      if (i == 0) break;
      if (maxsplit >= 0 && static_cast<int64_t>(words.size()) == maxsplit) {
        words.emplace_back(0, i);
        break;
      }
      size_t j = i;
      while (j > 0 && !IsPySpace(cps[j - 1])) --j;
      words.emplace_back(j, i);
      i = j;
    }
    std::reverse(words.begin(), words.end());
  }
  ValueList out;
  for (const auto& [a, b] : words) out.push_back(Value::String(std::string(s.substr(starts[a], starts[b] - starts[a]))));
  return out;
}

absl::StatusOr<Value> SplitImpl(const Value& s, const CallArgs& args, bool from_right) {
  TPSERVE_ASSIGN_OR_RETURN(int64_t maxsplit, MaxSplit(args));
  const Value* sep = args.Get(0, "sep");
  const std::string& text = s.AsString();
  if (sep == nullptr || sep->is_none()) return Value::List(SplitWhitespace(text, maxsplit, from_right));
  if (!sep->is_string()) return absl::InvalidArgumentError("must be str or None");
  const std::string& d = sep->AsString();
  if (d.empty()) return absl::InvalidArgumentError("empty separator");
  std::vector<std::string> parts;
  if (!from_right) {
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      const size_t at = text.find(d, start);
      if (at == std::string::npos) break;
      parts.push_back(text.substr(start, at - start));
      start = at + d.size();
    }
    parts.push_back(text.substr(start));
  } else {
    size_t end = text.size();
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      if (end < d.size()) break;
      const size_t at = text.rfind(d, end - d.size());
      if (at == std::string::npos) break;
      parts.push_back(text.substr(at + d.size(), end - at - d.size()));
      end = at;
    }
    parts.push_back(text.substr(0, end));
    std::reverse(parts.begin(), parts.end());
  }
  ValueList out;
  for (std::string& p : parts) out.push_back(Value::String(std::move(p)));
  return Value::List(std::move(out));
}

absl::StatusOr<Value> Split(Renderer&, const Value& s, const CallArgs& args) { return SplitImpl(s, args, false); }
absl::StatusOr<Value> RSplit(Renderer&, const Value& s, const CallArgs& args) { return SplitImpl(s, args, true); }

// The text of s[start:end] (code point bounds, Python's clamping) and its offset.
std::pair<std::string_view, size_t> Window(const std::string& s, const CallArgs& args, size_t first) {
  std::vector<size_t> starts;
  size_t pos = 0;
  while (pos < s.size()) {
    starts.push_back(pos);
    NextCodePoint(s, &pos);
  }
  const int64_t n = static_cast<int64_t>(starts.size());
  starts.push_back(s.size());
  auto bound = [&](size_t index, const char* name, int64_t dflt) {
    const Value* v = args.Get(index, name);
    if (v == nullptr || !(v->is_int() || v->is_bool())) return dflt;
    int64_t x = v->AsInt();
    if (x < 0) x += n;
    return std::min(std::max<int64_t>(x, 0), n);
  };
  const int64_t b = bound(first, "start", 0);
  const int64_t e = std::max(b, bound(first + 1, "end", n));
  return {std::string_view(s).substr(starts[b], starts[e] - starts[b]), static_cast<size_t>(b)};
}

template <bool kEnds>
absl::StatusOr<Value> StartsOrEnds(Renderer&, const Value& s, const CallArgs& args) {
  const Value* prefix = args.Get(0, "prefix");
  if (prefix == nullptr) return absl::InvalidArgumentError("startswith() takes at least 1 argument");
  ValueList options = prefix->kind() == Value::Kind::kTuple ? prefix->AsList() : ValueList{*prefix};
  const std::string_view text = Window(s.AsString(), args, 1).first;
  for (const Value& option : options) {
    if (!option.is_string()) {
      return absl::InvalidArgumentError("startswith first arg must be str or a tuple of str");
    }
    const std::string& p = option.AsString();
    if (p.size() > text.size()) continue;
    if (kEnds ? text.substr(text.size() - p.size()) == p : text.substr(0, p.size()) == p) {
      return Value::Bool(true);
    }
  }
  return Value::Bool(false);
}

template <bool kReverse, bool kRaise>
absl::StatusOr<Value> Find(Renderer&, const Value& s, const CallArgs& args) {
  TPSERVE_ASSIGN_OR_RETURN(std::string sub, StringArg(args, 0, "sub", "find"));
  const auto [text, offset] = Window(s.AsString(), args, 1);
  const size_t at = kReverse ? text.rfind(sub) : text.find(sub);
  if (at == std::string_view::npos) {
    if (kRaise) return absl::InvalidArgumentError("substring not found");
    return Value::Int(-1);
  }
  return Value::Int(static_cast<int64_t>(offset + CodePointCount(text.substr(0, at))));
}

absl::StatusOr<Value> Count(Renderer&, const Value& s, const CallArgs& args) {
  TPSERVE_ASSIGN_OR_RETURN(std::string sub, StringArg(args, 0, "sub", "count"));
  const std::string_view text = Window(s.AsString(), args, 1).first;
  if (sub.empty()) return Value::Int(static_cast<int64_t>(CodePointCount(text) + 1));
  int64_t count = 0;
  for (size_t at = text.find(sub); at != std::string_view::npos; at = text.find(sub, at + sub.size())) ++count;
  return Value::Int(count);
}

absl::StatusOr<Value> Replace(Renderer& renderer, const Value& s, const CallArgs& args) {
  TPSERVE_ASSIGN_OR_RETURN(std::string old_text, StringArg(args, 0, "old", "replace"));
  TPSERVE_ASSIGN_OR_RETURN(std::string new_text, StringArg(args, 1, "new", "replace"));
  const Value* count_arg = args.Get(2, "count");
  int64_t count = count_arg != nullptr && (count_arg->is_int() || count_arg->is_bool()) ? count_arg->AsInt() : -1;
  const std::string& text = s.AsString();
  std::string out;
  if (old_text.empty()) {
    const std::vector<std::string_view> chars = SplitCodePoints(text);
    for (size_t i = 0; i <= chars.size(); ++i) {
      if (count < 0 || static_cast<int64_t>(i) < count) out += new_text;
      if (i < chars.size()) out += chars[i];
      TPSERVE_RETURN_IF_ERROR(renderer.CheckSize(out.size()));
    }
    return Value::String(std::move(out));
  }
  size_t start = 0;
  for (int64_t done = 0; count < 0 || done < count; ++done) {
    const size_t at = text.find(old_text, start);
    if (at == std::string::npos) break;
    out.append(text, start, at - start);
    out += new_text;
    start = at + old_text.size();
    TPSERVE_RETURN_IF_ERROR(renderer.CheckSize(out.size()));
  }
  out.append(text, start, std::string::npos);
  TPSERVE_RETURN_IF_ERROR(renderer.CheckSize(out.size()));
  return Value::String(std::move(out));
}

absl::StatusOr<Value> Join(Renderer& renderer, const Value& s, const CallArgs& args) {
  const Value* items = args.Get(0, "iterable");
  if (items == nullptr) return absl::InvalidArgumentError("join() takes exactly one argument");
  ValueList list;
  if (items->is_sequence()) list = items->AsList();
  else if (items->is_dict()) for (const auto& e : items->AsMap().entries()) list.push_back(e.first);
  else if (items->is_string()) for (std::string_view c : SplitCodePoints(items->AsString())) list.push_back(Value::String(std::string(c)));
  else return absl::InvalidArgumentError("can only join an iterable");
  std::string out;
  for (size_t i = 0; i < list.size(); ++i) {
    if (!list[i].is_string()) {
      return absl::InvalidArgumentError(absl::StrCat("sequence item ", i, ": expected str instance, ",
                                                     list[i].TypeName(), " found"));
    }
    if (i > 0) out += s.AsString();
    out += list[i].AsString();
    TPSERVE_RETURN_IF_ERROR(renderer.CheckSize(out.size()));
  }
  return Value::String(std::move(out));
}

template <std::string (*kFn)(std::string_view)>
absl::StatusOr<Value> Transform(Renderer&, const Value& s, const CallArgs&) {
  return Value::String(kFn(s.AsString()));
}

template <bool (*kPred)(char32_t)>
absl::StatusOr<Value> AllChars(Renderer&, const Value& s, const CallArgs&) {
  const std::string& text = s.AsString();
  if (text.empty()) return Value::Bool(false);
  size_t pos = 0;
  while (pos < text.size()) {
    if (!kPred(NextCodePoint(text, &pos))) return Value::Bool(false);
  }
  return Value::Bool(true);
}

// str.isupper()/islower(): some cased character and none of the other case.
template <bool kUpper>
absl::StatusOr<Value> CaseCheck(Renderer&, const Value& s, const CallArgs&) {
  const std::string& text = s.AsString();
  bool cased = false;
  size_t pos = 0;
  while (pos < text.size()) {
    const char32_t cp = NextCodePoint(text, &pos);
    if (kUpper ? IsPyLower(cp) : IsPyUpper(cp)) return Value::Bool(false);
    cased = cased || (kUpper ? IsPyUpper(cp) : IsPyLower(cp));
  }
  return Value::Bool(cased);
}

absl::StatusOr<Value> SplitLines(Renderer&, const Value& s, const CallArgs& args) {
  const Value* keep = args.Get(0, "keepends");
  ValueList out;
  for (std::string& line : PySplitLines(s.AsString(), keep != nullptr && keep->Truthy())) {
    out.push_back(Value::String(std::move(line)));
  }
  return Value::List(std::move(out));
}

absl::StatusOr<Value> Format(Renderer& renderer, const Value& s, const CallArgs& args) {
  return BraceFormat(s.AsString(), args, renderer.options().max_output_bytes);
}

template <bool kSuffix>
absl::StatusOr<Value> RemoveAffix(Renderer&, const Value& s, const CallArgs& args) {
  TPSERVE_ASSIGN_OR_RETURN(std::string affix, StringArg(args, 0, "affix", "remove"));
  std::string text = s.AsString();
  if (affix.size() <= text.size()) {
    if (kSuffix && text.compare(text.size() - affix.size(), affix.size(), affix) == 0) text.resize(text.size() - affix.size());
    if (!kSuffix && text.compare(0, affix.size(), affix) == 0) text.erase(0, affix.size());
  }
  return Value::String(std::move(text));
}

template <bool kReverse>
absl::StatusOr<Value> Partition(Renderer&, const Value& s, const CallArgs& args) {
  TPSERVE_ASSIGN_OR_RETURN(std::string sep, StringArg(args, 0, "sep", "partition"));
  if (sep.empty()) return absl::InvalidArgumentError("empty separator");
  const std::string& text = s.AsString();
  const size_t at = kReverse ? text.rfind(sep) : text.find(sep);
  if (at == std::string::npos) {
    return kReverse ? Value::Tuple({Value::String(""), Value::String(""), s})
                    : Value::Tuple({s, Value::String(""), Value::String("")});
  }
  return Value::Tuple({Value::String(text.substr(0, at)), Value::String(sep),
                       Value::String(text.substr(at + sep.size()))});
}

// ljust/rjust/center/zfill: 'l', 'r', 'c', 'z'.
template <char kHow>
absl::StatusOr<Value> Justify(Renderer& renderer, const Value& s, const CallArgs& args) {
  const Value* width_arg = args.Get(0, "width");
  if (width_arg == nullptr || !(width_arg->is_int() || width_arg->is_bool())) {
    return absl::InvalidArgumentError("width must be an integer");
  }
  const std::string& text = s.AsString();
  const int64_t len = static_cast<int64_t>(CodePointCount(text));
  const int64_t width = width_arg->AsInt();
  if (width <= len) return s;
  TPSERVE_RETURN_IF_ERROR(renderer.CheckSize(static_cast<size_t>(width) * 4));
  std::string fill = kHow == 'z' ? "0" : " ";
  if (const Value* f = args.Get(1, "fillchar"); f != nullptr && f->is_string() && CodePointCount(f->AsString()) == 1) {
    fill = f->AsString();
  }
  const int64_t pad = width - len;
  int64_t left = kHow == 'r' || kHow == 'z' ? pad : kHow == 'l' ? 0 : pad / 2 + (pad & width & 1);
  auto repeat = [&fill](int64_t n) {
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += fill;
    return out;
  };
  if (kHow == 'z' && !text.empty() && (text[0] == '-' || text[0] == '+')) {
    return Value::String(text.substr(0, 1) + repeat(left) + text.substr(1));
  }
  return Value::String(repeat(left) + text + repeat(pad - left));
}

absl::StatusOr<Value> DictItems(Renderer&, const Value& d, const CallArgs&) {
  ValueList out;
  for (const auto& [key, value] : d.AsMap().entries()) out.push_back(Value::Tuple({key, value}));
  return Value::List(std::move(out));
}

absl::StatusOr<Value> DictKeys(Renderer&, const Value& d, const CallArgs&) {
  ValueList out;
  for (const auto& entry : d.AsMap().entries()) out.push_back(entry.first);
  return Value::List(std::move(out));
}

absl::StatusOr<Value> DictValues(Renderer&, const Value& d, const CallArgs&) {
  ValueList out;
  for (const auto& entry : d.AsMap().entries()) out.push_back(entry.second);
  return Value::List(std::move(out));
}

absl::StatusOr<Value> DictGet(Renderer&, const Value& d, const CallArgs& args) {
  const Value* key = args.Get(0, "key");
  if (key == nullptr) return absl::InvalidArgumentError("get expected at least 1 argument, got 0");
  if (const Value* found = d.AsMap().Find(*key)) return *found;
  const Value* fallback = args.Get(1, "default");
  return fallback != nullptr ? *fallback : Value::None();
}

absl::StatusOr<Value> ListIndex(Renderer&, const Value& l, const CallArgs& args) {
  const Value* item = args.Get(0, "value");
  if (item == nullptr) return absl::InvalidArgumentError("index expected at least 1 argument, got 0");
  const ValueList& items = l.AsList();
  for (size_t i = 0; i < items.size(); ++i) {
    if (PyEquals(items[i], *item)) return Value::Int(static_cast<int64_t>(i));
  }
  return absl::InvalidArgumentError(absl::StrCat(item->Repr(), " is not in list"));
}

absl::StatusOr<Value> ListCount(Renderer&, const Value& l, const CallArgs& args) {
  const Value* item = args.Get(0, "value");
  if (item == nullptr) return absl::InvalidArgumentError("count() takes exactly one argument (0 given)");
  int64_t n = 0;
  for (const Value& v : l.AsList()) n += PyEquals(v, *item) ? 1 : 0;
  return Value::Int(n);
}

struct Method {
  std::string_view name;
  MethodFn fn;
};

constexpr Method kStringMethods[] = {
    {"strip", Strip<true, true>}, {"lstrip", Strip<true, false>}, {"rstrip", Strip<false, true>},
    {"split", Split}, {"rsplit", RSplit}, {"startswith", StartsOrEnds<false>},
    {"endswith", StartsOrEnds<true>}, {"upper", Transform<PyUpper>}, {"lower", Transform<PyLower>},
    {"title", Transform<PyTitle>}, {"capitalize", Transform<PyCapitalize>}, {"replace", Replace},
    {"find", Find<false, false>}, {"rfind", Find<true, false>}, {"index", Find<false, true>},
    {"rindex", Find<true, true>}, {"count", Count}, {"join", Join}, {"format", Format},
    {"splitlines", SplitLines}, {"isdigit", AllChars<IsPyDigit>}, {"isalpha", AllChars<IsPyAlpha>},
    {"isspace", AllChars<IsPySpace>}, {"isalnum", AllChars<IsPyAlnum>},
    {"isdecimal", AllChars<IsPyDecimal>}, {"isnumeric", AllChars<IsPyNumeric>},
    {"isupper", CaseCheck<true>}, {"islower", CaseCheck<false>},
    {"removeprefix", RemoveAffix<false>}, {"removesuffix", RemoveAffix<true>},
    {"partition", Partition<false>}, {"rpartition", Partition<true>}, {"ljust", Justify<'l'>},
    {"rjust", Justify<'r'>}, {"center", Justify<'c'>}, {"zfill", Justify<'z'>},
};

constexpr Method kDictMethods[] = {
    {"items", DictItems}, {"keys", DictKeys}, {"values", DictValues}, {"get", DictGet},
};

constexpr Method kListMethods[] = {{"index", ListIndex}, {"count", ListCount}};

template <size_t N>
MethodFn Lookup(const Method (&table)[N], std::string_view name) {
  for (const Method& m : table) {
    if (m.name == name) return m.fn;
  }
  return nullptr;
}

MethodFn FindMethod(const Value& receiver, std::string_view name) {
  if (receiver.is_string()) return Lookup(kStringMethods, name);
  if (receiver.is_dict()) return Lookup(kDictMethods, name);
  if (receiver.is_sequence()) return Lookup(kListMethods, name);
  return nullptr;
}

}  // namespace

bool HasMethod(const Value& receiver, std::string_view name) {
  return FindMethod(receiver, name) != nullptr;
}

Value BindMethod(const Value& receiver, std::string name) {
  return Value::Function(std::make_shared<BoundMethod>(receiver, std::move(name)));
}

absl::StatusOr<Value> CallMethod(Renderer& renderer, const Value& receiver, std::string_view name,
                                 const CallArgs& args) {
  MethodFn fn = FindMethod(receiver, name);
  if (fn == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", receiver.TypeName(), "' object has no attribute '", std::string(name), "'"));
  }
  const size_t work = receiver.is_string() ? receiver.AsString().size() / 64 : receiver.is_sequence() ? receiver.AsList().size() : receiver.AsMap().size();
  TPSERVE_RETURN_IF_ERROR(renderer.Charge(static_cast<int64_t>(work)));
  return fn(renderer, receiver, args);
}

}  // namespace tpserve::jinja
