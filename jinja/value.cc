#include "jinja/value.h"

#include <algorithm>

namespace tpserve::jinja {
namespace {

const std::string& EmptyString() {
  static const std::string* empty = new std::string();
  return *empty;
}

const ValueList& EmptyList() {
  static const ValueList* empty = new ValueList();
  return *empty;
}

const ValueMap& EmptyMap() {
  static const ValueMap* empty = new ValueMap();
  return *empty;
}

int16_t ChildDepth(int depth) { return static_cast<int16_t>(std::min(depth + 1, 30000)); }

}  // namespace

Value Value::Undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.ptr_ = std::make_shared<std::string>(std::move(hint));
  return v;
}

Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.scalar_.b = b;
  return v;
}

Value Value::Int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.scalar_.i = i;
  return v;
}

Value Value::Float(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.scalar_.f = f;
  return v;
}

Value Value::String(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.ptr_ = std::make_shared<std::string>(std::move(s));
  return v;
}

Value Value::List(ValueList items) {
  Value v;
  v.kind_ = Kind::kList;
  int depth = 0;
  for (const Value& item : items) {
    depth = std::max(depth, item.depth());
    v.holds_namespace_ = v.holds_namespace_ || item.holds_namespace();
  }
  v.depth_ = ChildDepth(depth);
  v.ptr_ = std::make_shared<ValueList>(std::move(items));
  return v;
}

Value Value::Tuple(ValueList items) {
  Value v = List(std::move(items));
  v.kind_ = Kind::kTuple;
  return v;
}

Value Value::Dict(ValueMap map) {
  Value v;
  v.kind_ = Kind::kDict;
  int depth = 0;
  for (const auto& [key, value] : map.entries()) {
    depth = std::max({depth, key.depth(), value.depth()});
    v.holds_namespace_ = v.holds_namespace_ || value.holds_namespace();
  }
  v.depth_ = ChildDepth(depth);
  v.ptr_ = std::make_shared<ValueMap>(std::move(map));
  return v;
}

Value Value::Namespace(ValueMap attrs) {
  Value v = Dict(std::move(attrs));
  v.kind_ = Kind::kNamespace;
  v.holds_namespace_ = true;
  return v;
}

Value Value::Function(std::shared_ptr<const Callable> fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.holds_namespace_ = fn->holds_namespace();
  v.ptr_ = std::const_pointer_cast<Callable>(std::move(fn));
  return v;
}

double Value::AsFloat() const {
  switch (kind_) {
    case Kind::kFloat: return scalar_.f;
    case Kind::kInt: return static_cast<double>(scalar_.i);
    case Kind::kBool: return scalar_.b ? 1.0 : 0.0;
    default: return 0.0;
  }
}

const std::string& Value::AsString() const {
  if ((kind_ == Kind::kString || kind_ == Kind::kUndefined) && ptr_ != nullptr) {
    return *static_cast<const std::string*>(ptr_.get());
  }
  return EmptyString();
}

const ValueList& Value::AsList() const {
  if (is_sequence()) return *static_cast<const ValueList*>(ptr_.get());
  return EmptyList();
}

const ValueMap& Value::AsMap() const {
  if (is_dict() || is_namespace()) return *static_cast<const ValueMap*>(ptr_.get());
  return EmptyMap();
}

ValueMap& Value::MutableNamespace() const { return *static_cast<ValueMap*>(ptr_.get()); }

const Callable& Value::AsCallable() const { return *static_cast<const Callable*>(ptr_.get()); }

std::shared_ptr<const Callable> Value::callable_ptr() const {
  if (!is_callable()) return nullptr;
  return std::static_pointer_cast<const Callable>(ptr_);
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined: case Kind::kNone: return false;
    case Kind::kBool: return scalar_.b;
    case Kind::kInt: return scalar_.i != 0;
    case Kind::kFloat: return scalar_.f != 0.0;
    case Kind::kString: return !AsString().empty();
    case Kind::kList: case Kind::kTuple: return !AsList().empty();
    case Kind::kDict: return !AsMap().empty();
    case Kind::kNamespace: case Kind::kCallable: return true;
  }
  return false;
}

std::string Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return "list";
    case Kind::kTuple: return "tuple";
    case Kind::kDict: return "dict";
    case Kind::kNamespace: return "Namespace";
    case Kind::kCallable: return "function";
  }
  return "object";
}

bool PyEquals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.AsFloat() == b.AsFloat();
    return a.AsInt() == b.AsInt();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined: case Value::Kind::kNone: return true;
    case Value::Kind::kString: return a.AsString() == b.AsString();
    case Value::Kind::kList: case Value::Kind::kTuple: {
      const ValueList& x = a.AsList();
      const ValueList& y = b.AsList();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!PyEquals(x[i], y[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      const ValueMap& x = a.AsMap();
      const ValueMap& y = b.AsMap();
      if (x.size() != y.size()) return false;
      for (const auto& [key, value] : x.entries()) {
        const Value* other = y.Find(key);
        if (other == nullptr || !PyEquals(value, *other)) return false;
      }
      return true;
    }
    case Value::Kind::kNamespace:
      return &a.AsMap() == &b.AsMap();
    case Value::Kind::kCallable:
      return &a.AsCallable() == &b.AsCallable();
    default:
      return false;
  }
}

const Value* ValueMap::Find(const Value& key) const {
  if (key.is_string()) return Find(std::string_view(key.AsString()));
  for (const Entry& entry : entries_) {
    if (PyEquals(entry.first, key)) return &entry.second;
  }
  return nullptr;
}

const Value* ValueMap::Find(std::string_view key) const {
  for (const Entry& entry : entries_) {
    if (entry.first.is_string() && entry.first.AsString() == key) return &entry.second;
  }
  return nullptr;
}

void ValueMap::Set(Value key, Value value) {
  for (Entry& entry : entries_) {
    if (PyEquals(entry.first, key)) {
      entry.second = std::move(value);
      return;
    }
  }
  entries_.emplace_back(std::move(key), std::move(value));
}

const Value* CallArgs::Get(size_t index, std::string_view name) const {
  if (index < positional.size()) return &positional[index];
  for (const auto& [key, value] : named) {
    if (key == name) return &value;
  }
  return nullptr;
}

}  // namespace tpserve::jinja
