// Filters over sequences and mappings: length, first, join, map, select,
// sort, unique, sum, min, max, batch, items, dictsort.
#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "jinja/filters.h"
#include "jinja/operators.h"
#include "jinja/renderer.h"
#include "jinja/unicode.h"

namespace tpserve::jinja {
namespace {

// jinja2's make_attrgetter: "a.b.0" looks up a, then b, then item 0.
Value LookupPath(const Value& item, std::string_view path) {
  Value v = item;
  const std::vector<std::string> parts = absl::StrSplit(std::string(path), '.');
  for (const std::string& part : parts) {
    int64_t index = 0;
    v = absl::SimpleAtoi(part, &index) ? GetItem(v, Value::Int(index)) : GetItem(v, Value::String(std::string(part)));
    if (v.is_undefined()) return v;
  }
  return v;
}

// The sort key of jinja2's ignore_case: strings lowercased.
Value SortKey(const Value& item, const CallArgs& args, bool case_sensitive) {
  const Value* attribute = args.Get(99, "attribute");
  Value key = attribute != nullptr && !attribute->is_none() ? LookupPath(item, attribute->Str()) : item;
  if (!case_sensitive && key.is_string()) return Value::String(PyLower(key.AsString()));
  return key;
}

bool ArgTruthy(const CallArgs& args, size_t index, std::string_view name, bool dflt) {
  const Value* v = args.Get(index, name);
  return v == nullptr ? dflt : v->Truthy();
}

absl::StatusOr<ValueList> Items(Renderer& renderer, const Value& input) {
  TPSERVE_ASSIGN_OR_RETURN(ValueList items, Iterate(input));
  TPSERVE_RETURN_IF_ERROR(renderer.Charge(static_cast<int64_t>(items.size())));
  return items;
}

absl::StatusOr<Value> Length(Renderer&, const Value& input, const CallArgs&) {
  if (input.is_string()) return Value::Int(static_cast<int64_t>(CodePointCount(input.AsString())));
  if (input.is_sequence()) return Value::Int(static_cast<int64_t>(input.AsList().size()));
  if (input.is_dict()) return Value::Int(static_cast<int64_t>(input.AsMap().size()));
  if (input.is_undefined()) return Value::Int(0);
  return absl::InvalidArgumentError(absl::StrCat("object of type '", input.TypeName(), "' has no len()"));
}

absl::StatusOr<Value> First(Renderer& renderer, const Value& input, const CallArgs&) {
  TPSERVE_ASSIGN_OR_RETURN(ValueList items, Items(renderer, input));
  if (items.empty()) return Value::Undefined("No first item, sequence was empty.");
  return items.front();
}

absl::StatusOr<Value> Last(Renderer& renderer, const Value& input, const CallArgs&) {
  if (input.is_undefined()) return UndefinedError(input);
  TPSERVE_ASSIGN_OR_RETURN(ValueList items, Items(renderer, input));
  if (items.empty()) return Value::Undefined("No last item, sequence was empty.");
  return items.back();
}

absl::StatusOr<Value> Join(Renderer& renderer, const Value& input, const CallArgs& args) {
  TPSERVE_ASSIGN_OR_RETURN(ValueList items, Items(renderer, input));
  const Value* sep = args.Get(0, "d");
  const std::string separator = sep != nullptr ? sep->Str() : "";
  const Value* attribute = args.Get(1, "attribute");
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += separator;
    out += attribute != nullptr && !attribute->is_none() ? LookupPath(items[i], attribute->Str()).Str() : items[i].Str();
    TPSERVE_RETURN_IF_ERROR(renderer.CheckSize(out.size()));
  }
  return Value::String(std::move(out));
}

absl::StatusOr<Value> List(Renderer& renderer, const Value& input, const CallArgs&) {
  TPSERVE_ASSIGN_OR_RETURN(ValueList items, Items(renderer, input));
  return Value::List(std::move(items));
}

// The filter or test name and its arguments after `skip` leading ones.
CallArgs Rest(const CallArgs& args, size_t skip) {
  CallArgs rest;
  for (size_t i = skip; i < args.positional.size(); ++i) rest.positional.push_back(args.positional[i]);
  return rest;
}

absl::StatusOr<Value> Map(Renderer& renderer, const Value& input, const CallArgs& args) {
  TPSERVE_ASSIGN_OR_RETURN(ValueList items, Items(renderer, input));
  ValueList out;
  if (args.positional.empty()) {
    const Value* attribute = args.Get(99, "attribute");
    if (attribute == nullptr) return absl::InvalidArgumentError("map requires a filter argument");
    const Value* dflt = args.Get(99, "default");
    for (const Value& item : items) {
      Value v = LookupPath(item, attribute->Str());
      out.push_back(v.is_undefined() && dflt != nullptr ? *dflt : v);
    }
    return Value::List(std::move(out));
  }
  const std::string name = args.positional[0].Str();
  CallArgs rest = Rest(args, 1);
  rest.named = args.named;
  for (const Value& item : items) {
    TPSERVE_ASSIGN_OR_RETURN(Value v, renderer.ApplyFilter(name, item, rest));
    out.push_back(std::move(v));
  }
  return Value::List(std::move(out));
}

// select/reject (kAttr false) and selectattr/rejectattr (kAttr true).
template <bool kKeep, bool kAttr>
absl::StatusOr<Value> Select(Renderer& renderer, const Value& input, const CallArgs& args) {
  TPSERVE_ASSIGN_OR_RETURN(ValueList items, Items(renderer, input));
  const size_t skip = kAttr ? 1 : 0;
  if (kAttr && args.positional.empty()) return absl::InvalidArgumentError("selectattr needs an attribute");
  const bool has_test = args.positional.size() > skip;
  const std::string test = has_test ? args.positional[skip].Str() : "";
  CallArgs rest = Rest(args, skip + 1);
  rest.named = args.named;
  ValueList out;
  for (const Value& item : items) {
    const Value subject = kAttr ? LookupPath(item, args.positional[0].Str()) : item;
    bool pass = subject.Truthy();
    if (has_test) {
      TPSERVE_ASSIGN_OR_RETURN(pass, renderer.ApplyTest(test, subject, rest));
    }
    if (pass == kKeep) out.push_back(item);
  }
  return Value::List(std::move(out));
}

absl::StatusOr<Value> ItemsFilter(Renderer&, const Value& input, const CallArgs&) {
  if (input.is_undefined()) return Value::List({});
  if (!input.is_dict()) return absl::InvalidArgumentError("Can only get item pairs from a mapping.");
  ValueList out;
  for (const auto& [key, value] : input.AsMap().entries()) out.push_back(Value::Tuple({key, value}));
  return Value::List(std::move(out));
}

absl::Status SortValues(ValueList* keys, std::vector<size_t>* order, bool reverse) {
  absl::Status status;
  std::stable_sort(order->begin(), order->end(), [&](size_t a, size_t b) {
    absl::StatusOr<int> c = ThreeWayCompare((*keys)[reverse ? b : a], (*keys)[reverse ? a : b]);
    if (!c.ok()) {
      status = c.status();
      return false;
    }
    return *c < 0;
  });
  return status;
}

absl::StatusOr<Value> Sort(Renderer& renderer, const Value& input, const CallArgs& args) {
  TPSERVE_ASSIGN_OR_RETURN(ValueList items, Items(renderer, input));
  const bool reverse = ArgTruthy(args, 0, "reverse", false);
  const bool case_sensitive = ArgTruthy(args, 1, "case_sensitive", false);
  CallArgs key_args;
  if (const Value* attribute = args.Get(2, "attribute")) key_args.named.emplace_back("attribute", *attribute);
  ValueList keys;
  std::vector<size_t> order;
  for (size_t i = 0; i < items.size(); ++i) {
    keys.push_back(SortKey(items[i], key_args, case_sensitive));
    order.push_back(i);
  }
  TPSERVE_RETURN_IF_ERROR(SortValues(&keys, &order, reverse));
  ValueList out;
  for (size_t i : order) out.push_back(items[i]);
  return Value::List(std::move(out));
}

absl::StatusOr<Value> DictSort(Renderer& renderer, const Value& input, const CallArgs& args) {
  if (!input.is_dict()) return absl::InvalidArgumentError("dictsort needs a mapping");
  const bool case_sensitive = ArgTruthy(args, 0, "case_sensitive", false);
  const Value* by = args.Get(1, "by");
  const bool by_value = by != nullptr && by->Str() == "value";
  const bool reverse = ArgTruthy(args, 2, "reverse", false);
  ValueList pairs;
  ValueList keys;
  std::vector<size_t> order;
  for (const auto& [key, value] : input.AsMap().entries()) {
    pairs.push_back(Value::Tuple({key, value}));
    keys.push_back(SortKey(by_value ? value : key, {}, case_sensitive));
    order.push_back(order.size());
  }
  TPSERVE_RETURN_IF_ERROR(renderer.Charge(static_cast<int64_t>(pairs.size())));
  TPSERVE_RETURN_IF_ERROR(SortValues(&keys, &order, reverse));
  ValueList out;
  for (size_t i : order) out.push_back(pairs[i]);
  return Value::List(std::move(out));
}

absl::StatusOr<Value> Unique(Renderer& renderer, const Value& input, const CallArgs& args) {
  TPSERVE_ASSIGN_OR_RETURN(ValueList items, Items(renderer, input));
  const bool case_sensitive = ArgTruthy(args, 0, "case_sensitive", false);
  CallArgs key_args;
  if (const Value* attribute = args.Get(1, "attribute")) key_args.named.emplace_back("attribute", *attribute);
  ValueList seen;
  ValueList out;
  for (const Value& item : items) {
    Value key = SortKey(item, key_args, case_sensitive);
    bool dup = false;
    for (const Value& s : seen) dup = dup || PyEquals(s, key);
    TPSERVE_RETURN_IF_ERROR(renderer.Charge(static_cast<int64_t>(seen.size())));
    if (dup) continue;
    seen.push_back(std::move(key));
    out.push_back(item);
  }
  return Value::List(std::move(out));
}

absl::StatusOr<Value> Reverse(Renderer& renderer, const Value& input, const CallArgs&) {
  if (input.is_string()) {
    std::vector<std::string_view> chars = SplitCodePoints(input.AsString());
    std::string out;
    for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += *it;
    return Value::String(std::move(out));
  }
  TPSERVE_ASSIGN_OR_RETURN(ValueList items, Items(renderer, input));
  std::reverse(items.begin(), items.end());
  return Value::List(std::move(items));
}

absl::StatusOr<Value> Sum(Renderer& renderer, const Value& input, const CallArgs& args) {
  TPSERVE_ASSIGN_OR_RETURN(ValueList items, Items(renderer, input));
  const Value* attribute = args.Get(0, "attribute");
  const Value* start = args.Get(1, "start");
  Value total = start != nullptr ? *start : Value::Int(0);
  for (const Value& item : items) {
    const Value v = attribute != nullptr && !attribute->is_none() ? LookupPath(item, attribute->Str()) : item;
    TPSERVE_ASSIGN_OR_RETURN(total, BinaryOperation("+", total, v, renderer.options().max_output_bytes));
  }
  return total;
}

template <bool kMax>
absl::StatusOr<Value> MinMax(Renderer& renderer, const Value& input, const CallArgs& args) {
  TPSERVE_ASSIGN_OR_RETURN(ValueList items, Items(renderer, input));
  if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
  const bool case_sensitive = ArgTruthy(args, 0, "case_sensitive", false);
  CallArgs key_args;
  if (const Value* attribute = args.Get(1, "attribute")) key_args.named.emplace_back("attribute", *attribute);
  size_t best = 0;
  Value best_key = SortKey(items[0], key_args, case_sensitive);
  for (size_t i = 1; i < items.size(); ++i) {
    Value key = SortKey(items[i], key_args, case_sensitive);
    TPSERVE_ASSIGN_OR_RETURN(int c, ThreeWayCompare(key, best_key));
    if (kMax ? c > 0 : c < 0) {
      best = i;
      best_key = std::move(key);
    }
  }
  return items[best];
}

absl::StatusOr<Value> Batch(Renderer& renderer, const Value& input, const CallArgs& args) {
  TPSERVE_ASSIGN_OR_RETURN(ValueList items, Items(renderer, input));
  const Value* count_arg = args.Get(0, "linecount");
  if (count_arg == nullptr || !count_arg->is_int() || count_arg->AsInt() <= 0) {
    return absl::InvalidArgumentError("batch needs a positive linecount");
  }
  const size_t count = static_cast<size_t>(count_arg->AsInt());
  const Value* fill = args.Get(1, "fill_with");
  ValueList out;
  for (size_t i = 0; i < items.size(); i += count) {
    ValueList batch(items.begin() + i, items.begin() + std::min(items.size(), i + count));
    if (fill != nullptr && !fill->is_none()) {
      while (batch.size() < count) batch.push_back(*fill);
    }
    out.push_back(Value::List(std::move(batch)));
  }
  return Value::List(std::move(out));
}

// Groups of items with equal attribute, sorted by it: (grouper, list) pairs.
absl::StatusOr<Value> GroupBy(Renderer& renderer, const Value& input, const CallArgs& args) {
  TPSERVE_ASSIGN_OR_RETURN(ValueList items, Items(renderer, input));
  const Value* attribute = args.Get(0, "attribute");
  if (attribute == nullptr) return absl::InvalidArgumentError("groupby needs an attribute");
  const Value* dflt = args.Get(1, "default");
  const bool case_sensitive = ArgTruthy(args, 2, "case_sensitive", false);
  auto key_of = [&](const Value& item, bool fold) {
    Value key = LookupPath(item, attribute->Str());
    if (key.is_undefined() && dflt != nullptr) key = *dflt;
    if (fold && key.is_string()) key = Value::String(PyLower(key.AsString()));
    return key;
  };
  ValueList keys;
  std::vector<size_t> order;
  for (size_t i = 0; i < items.size(); ++i) {
    keys.push_back(key_of(items[i], !case_sensitive));
    order.push_back(i);
  }
  TPSERVE_RETURN_IF_ERROR(SortValues(&keys, &order, false));
  ValueList groups;
  ValueList members;
  for (size_t k = 0; k < order.size(); ++k) {
    members.push_back(items[order[k]]);
    if (k + 1 == order.size() || !PyEquals(keys[order[k]], keys[order[k + 1]])) {
      Value grouper = key_of(members[0], false);
      groups.push_back(Value::Tuple({grouper, Value::List(std::move(members))}));
      members.clear();
    }
  }
  return Value::List(std::move(groups));
}

absl::StatusOr<Value> Pprint(Renderer&, const Value& input, const CallArgs&) { return Value::String(input.Repr()); }

struct Filter {
  std::string_view name;
  FilterFn fn;
};

constexpr Filter kFilters[] = {
    {"length", Length}, {"count", Length}, {"first", First}, {"last", Last}, {"join", Join},
    {"list", List}, {"map", Map}, {"select", Select<true, false>}, {"reject", Select<false, false>},
    {"selectattr", Select<true, true>}, {"rejectattr", Select<false, true>}, {"items", ItemsFilter},
    {"sort", Sort}, {"dictsort", DictSort}, {"unique", Unique}, {"reverse", Reverse}, {"sum", Sum},
    {"min", MinMax<false>}, {"max", MinMax<true>}, {"batch", Batch}, {"groupby", GroupBy}, {"pprint", Pprint},
};

}  // namespace

FilterFn FindSequenceFilter(std::string_view name) {
  for (const Filter& f : kFilters) {
    if (f.name == name) return f.fn;
  }
  return nullptr;
}

}  // namespace tpserve::jinja
