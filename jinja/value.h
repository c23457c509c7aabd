// The values a template computes with, with Python's semantics (jinja2 runs on
// Python objects): undefined, none, bool, 64-bit int, float, UTF-8 str, list,
// tuple, insertion-ordered dict, namespace and callables (macros, builtins,
// bound methods).
//
// Values are cheap to copy: strings and containers are shared and immutable
// (the sandbox is immutable), except a namespace, whose attributes a template
// may set. A namespace never holds a namespace (checked where attributes are
// set), so values form no cycles and their depth stays bounded.
// A Value is not synchronised: one render owns the values it creates; values
// built by a caller may be shared read-only between renders.
#ifndef TPSERVE_JINJA_VALUE_H_
#define TPSERVE_JINJA_VALUE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace tpserve::jinja {

class Value;
class ValueMap;
class Callable;
class Renderer;

using ValueList = std::vector<Value>;

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kTuple, kDict, kNamespace, kCallable,
  };

  Value() = default;  // undefined, with no hint
  // `hint` is what an error says when the undefined value is used, e.g.
  // "'dict object' has no attribute 'x'".
  static Value Undefined(std::string hint);
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double f);
  static Value String(std::string s);
  static Value List(ValueList items);
  static Value Tuple(ValueList items);
  static Value Dict(ValueMap map);
  static Value Namespace(ValueMap attrs);
  static Value Function(std::shared_ptr<const Callable> fn);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_string() const { return kind_ == Kind::kString; }
  // list or tuple
  bool is_sequence() const { return kind_ == Kind::kList || kind_ == Kind::kTuple; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_callable() const { return kind_ == Kind::kCallable; }
  // int, float or bool (Python's bool is an int)
  bool is_number() const {
    return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool;
  }

  bool AsBool() const { return scalar_.b; }
  // int or bool as an integer
  int64_t AsInt() const { return kind_ == Kind::kBool ? scalar_.b : scalar_.i; }
  // any number as a double
  double AsFloat() const;
  const std::string& AsString() const;  // also an undefined value's hint
  const ValueList& AsList() const;      // list or tuple
  const ValueMap& AsMap() const;        // dict or namespace
  ValueMap& MutableNamespace() const;
  const Callable& AsCallable() const;
  std::shared_ptr<const Callable> callable_ptr() const;

  // Nesting depth of containers (a scalar is 0) as recorded when built.
  int depth() const { return depth_; }
  // Whether a namespace is reachable from this value.
  bool holds_namespace() const { return holds_namespace_; }

  bool Truthy() const;
  // Python's str() and repr(); undefined prints as "".
  std::string Str() const;
  std::string Repr() const;
  // The type's name as Python spells it: 'str', 'dict', 'NoneType', ...
  std::string TypeName() const;

 private:
  union Scalar {
    bool b;
    int64_t i;
    double f;
  };
  Kind kind_ = Kind::kUndefined;
  bool holds_namespace_ = false;
  int16_t depth_ = 0;
  Scalar scalar_{};
  std::shared_ptr<void> ptr_;  // std::string, ValueList, ValueMap or Callable
};

// A dict or namespace: keys in insertion order, any value as a key (Python's
// equality decides: 1, 1.0 and True are one key).
class ValueMap {
 public:
  using Entry = std::pair<Value, Value>;

  const Value* Find(const Value& key) const;
  const Value* Find(std::string_view key) const;
  // Inserts, or replaces the value of an equal key in its place.
  void Set(Value key, Value value);
  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  const std::vector<Entry>& entries() const { return entries_; }

 private:
  std::vector<Entry> entries_;
};

struct CallArgs {
  ValueList positional;
  std::vector<std::pair<std::string, Value>> named;

  // The argument at `index` or named `name`, else null.
  const Value* Get(size_t index, std::string_view name) const;
};

// Something a template can call: a macro, a builtin function, a bound method.
class Callable {
 public:
  virtual ~Callable() = default;
  virtual absl::StatusOr<Value> Call(Renderer& renderer, CallArgs args) const = 0;
  // What str() prints, e.g. "<Macro 'render'>".
  virtual std::string Describe() const = 0;
  // Whether calling it may reach a namespace (a bound method of a container).
  virtual bool holds_namespace() const { return false; }
};

// Python's == (numbers across int/float/bool; lists and tuples never equal;
// dicts regardless of order; undefined equals undefined).
bool PyEquals(const Value& a, const Value& b);

}  // namespace tpserve::jinja

#endif  // TPSERVE_JINJA_VALUE_H_
