// The renderer's expression half: one function per kind of node.
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "jinja/filters.h"
#include "jinja/globals.h"
#include "jinja/json_convert.h"
#include "jinja/operators.h"
#include "jinja/predicates.h"
#include "jinja/renderer.h"

namespace tpserve::jinja {
namespace {

using Kind = ExprNode::Kind;

absl::Status CheckHashable(const Value& key) {
  if (key.is_sequence() && key.kind() == Value::Kind::kList) {
    return absl::InvalidArgumentError("unhashable type: 'list'");
  }
  if (key.is_dict()) return absl::InvalidArgumentError("unhashable type: 'dict'");
  return absl::OkStatus();
}

absl::StatusOr<std::optional<int64_t>> SliceBound(const Value& v) {
  if (v.is_none()) return std::optional<int64_t>();
  if (v.is_int() || v.is_bool()) return std::optional<int64_t>(v.AsInt());
  if (v.is_undefined()) return UndefinedError(v);
  return absl::InvalidArgumentError(
      "slice indices must be integers or None or have an __index__ method");
}

}  // namespace

absl::StatusOr<Value> Renderer::Evaluate(const ExprNode& expr) {
  absl::Status charged = Charge(1);
  ++depth_;
  if (charged.ok() && depth_ > kMaxRenderDepth) {
    charged = absl::InvalidArgumentError("template nests too deeply when rendered");
  }
  absl::StatusOr<Value> v = charged.ok() ? EvaluateNode(expr) : absl::StatusOr<Value>(charged);
  --depth_;
  if (v.ok() && v->depth() > kMaxValueDepth) v = absl::InvalidArgumentError("value nests too deeply");
  if (!v.ok()) return Locate(v.status(), expr.line, expr.column);
  return v;
}

// Each kind in a function of its own keeps this frame, which every nesting
// level of an expression repeats on the stack, small.
absl::StatusOr<Value> Renderer::EvaluateNode(const ExprNode& expr) {
  switch (expr.kind) {
    case Kind::kLiteral: return expr.literal;
    case Kind::kName: return EvaluateName(expr);
    case Kind::kList: case Kind::kTuple: return EvaluateSequence(expr);
    case Kind::kDict: return EvaluateDict(expr);
    case Kind::kAttr: case Kind::kItem: return EvaluateLookup(expr);
    case Kind::kSlice: return EvaluateSlice(expr);
    case Kind::kCall: return EvaluateCall(expr);
    case Kind::kFilter: return EvaluateFilter(expr);
    case Kind::kTest: return EvaluateTest(expr);
    case Kind::kUnary: case Kind::kBinary: return EvaluateOperator(expr);
    case Kind::kCompare: return EvaluateCompare(expr);
    case Kind::kCondition: return EvaluateCondition(expr);
  }
  return absl::InternalError("unknown expression");
}

absl::StatusOr<Value> Renderer::EvaluateSequence(const ExprNode& expr) {
  ValueList items;
  for (const ExprPtr& arg : expr.args) {
    TPSERVE_ASSIGN_OR_RETURN(Value item, Evaluate(*arg));
    items.push_back(std::move(item));
  }
  return expr.kind == Kind::kList ? Value::List(std::move(items)) : Value::Tuple(std::move(items));
}

absl::StatusOr<Value> Renderer::EvaluateDict(const ExprNode& expr) {
  ValueMap map;
  for (size_t i = 0; i + 1 < expr.args.size(); i += 2) {
    TPSERVE_ASSIGN_OR_RETURN(Value key, Evaluate(*expr.args[i]));
    TPSERVE_RETURN_IF_ERROR(CheckHashable(key));
    TPSERVE_ASSIGN_OR_RETURN(Value value, Evaluate(*expr.args[i + 1]));
    map.Set(std::move(key), std::move(value));
  }
  return Value::Dict(std::move(map));
}

// obj.name and obj[key].
absl::StatusOr<Value> Renderer::EvaluateLookup(const ExprNode& expr) {
  TPSERVE_ASSIGN_OR_RETURN(Value obj, Evaluate(*expr.args[0]));
  if (expr.kind == Kind::kAttr) {
    if (obj.is_undefined()) return UndefinedError(obj);
    return GetAttribute(obj, expr.name);
  }
  TPSERVE_ASSIGN_OR_RETURN(Value key, Evaluate(*expr.args[1]));
  if (obj.is_undefined()) return UndefinedError(obj);
  return GetItem(obj, key);
}

absl::StatusOr<Value> Renderer::EvaluateTest(const ExprNode& expr) {
  TPSERVE_ASSIGN_OR_RETURN(Value input, Evaluate(*expr.args[0]));
  TPSERVE_ASSIGN_OR_RETURN(CallArgs args, EvaluateArgs(expr, 1));
  TPSERVE_ASSIGN_OR_RETURN(bool result, ApplyTest(expr.name, input, args));
  return Value::Bool(result);
}

absl::StatusOr<Value> Renderer::EvaluateOperator(const ExprNode& expr) {
  TPSERVE_ASSIGN_OR_RETURN(Value left, Evaluate(*expr.args[0]));
  if (expr.kind == Kind::kUnary) {
    if (expr.name == "not") return Value::Bool(!left.Truthy());
    return UnaryOperation(expr.name, left);
  }
  // and/or return an operand, as in Python, and skip the right one when they can.
  if (expr.name == "and" && !left.Truthy()) return left;
  if (expr.name == "or" && left.Truthy()) return left;
  TPSERVE_ASSIGN_OR_RETURN(Value right, Evaluate(*expr.args[1]));
  if (expr.name == "and" || expr.name == "or") return right;
  if (expr.name == "~") {
    std::string text = left.Str();
    const std::string tail = right.Str();
    TPSERVE_RETURN_IF_ERROR(CheckSize(text.size() + tail.size()));
    return Value::String(text + tail);
  }
  return BinaryOperation(expr.name, left, right, options_.max_output_bytes);
}

absl::StatusOr<Value> Renderer::EvaluateCondition(const ExprNode& expr) {
  TPSERVE_ASSIGN_OR_RETURN(Value test, Evaluate(*expr.args[0]));
  if (test.Truthy()) return Evaluate(*expr.args[1]);
  if (expr.args[2] == nullptr) {
    return Value::Undefined(
        "the inline if-expression evaluated to false and no else section was defined.");
  }
  return Evaluate(*expr.args[2]);
}

absl::StatusOr<Value> Renderer::EvaluateName(const ExprNode& expr) {
  if (const Value* v = scope_->Find(expr.name)) return *v;
  if (const Value* v = FindGlobal(expr.name)) return *v;
  return Value::Undefined(absl::StrCat("'", expr.name, "' is undefined"));
}

absl::StatusOr<CallArgs> Renderer::EvaluateArgs(const ExprNode& expr, size_t first) {
  CallArgs args;
  for (size_t i = first; i < expr.args.size(); ++i) {
    TPSERVE_ASSIGN_OR_RETURN(Value v, Evaluate(*expr.args[i]));
    args.positional.push_back(std::move(v));
  }
  for (const auto& [name, arg] : expr.kwargs) {
    TPSERVE_ASSIGN_OR_RETURN(Value v, Evaluate(*arg));
    if (name == "*") {
      TPSERVE_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
      for (Value& item : items) args.positional.push_back(std::move(item));
    } else if (name == "**") {
      if (!v.is_dict()) return absl::InvalidArgumentError("argument after ** must be a mapping");
      for (const auto& [key, value] : v.AsMap().entries()) {
        if (!key.is_string()) return absl::InvalidArgumentError("keywords must be strings");
        args.named.emplace_back(key.AsString(), value);
      }
    } else {
      args.named.emplace_back(name, std::move(v));
    }
  }
  return args;
}

absl::StatusOr<Value> Renderer::EvaluateCall(const ExprNode& expr) {
  TPSERVE_ASSIGN_OR_RETURN(Value callee, Evaluate(*expr.args[0]));
  TPSERVE_ASSIGN_OR_RETURN(CallArgs args, EvaluateArgs(expr, 1));
  return CallValue(callee, std::move(args));
}

absl::StatusOr<Value> Renderer::CallValue(const Value& callee, CallArgs args) {
  if (callee.is_undefined()) return UndefinedError(callee);
  if (!callee.is_callable()) {
    return absl::InvalidArgumentError(absl::StrCat("'", callee.TypeName(), "' object is not callable"));
  }
  // Keep the callable alive while it runs, whatever the call reassigns.
  std::shared_ptr<const Callable> fn = callee.callable_ptr();
  return fn->Call(*this, std::move(args));
}

absl::StatusOr<Value> Renderer::EvaluateFilter(const ExprNode& expr) {
  Value input;
  if (expr.args[0] != nullptr) {
    TPSERVE_ASSIGN_OR_RETURN(input, Evaluate(*expr.args[0]));
  } else if (filter_input_ != nullptr) {
    input = *filter_input_;
  }
  TPSERVE_ASSIGN_OR_RETURN(CallArgs args, EvaluateArgs(expr, 1));
  return ApplyFilter(expr.name, input, args);
}

absl::StatusOr<Value> Renderer::ApplyFilterChain(const ExprNode& chain, Value input) {
  const Value* outer = filter_input_;
  filter_input_ = &input;
  absl::StatusOr<Value> v = Evaluate(chain);
  filter_input_ = outer;
  return v;
}

absl::StatusOr<Value> Renderer::ApplyFilter(std::string_view name, const Value& input,
                                            const CallArgs& args) {
  FilterFn fn = FindFilter(name);
  if (fn == nullptr) return absl::InvalidArgumentError(absl::StrCat("No filter named '", std::string(name), "'."));
  return fn(*this, input, args);
}

absl::StatusOr<bool> Renderer::ApplyTest(std::string_view name, const Value& input,
                                         const CallArgs& args) {
  TestFn fn = FindTest(name);
  if (fn == nullptr) return absl::InvalidArgumentError(absl::StrCat("No test named '", std::string(name), "'."));
  return fn(input, args);
}

absl::StatusOr<Value> Renderer::EvaluateCompare(const ExprNode& expr) {
  TPSERVE_ASSIGN_OR_RETURN(Value left, Evaluate(*expr.args[0]));
  for (size_t i = 0; i < expr.ops.size(); ++i) {
    TPSERVE_ASSIGN_OR_RETURN(Value right, Evaluate(*expr.args[i + 1]));
    TPSERVE_ASSIGN_OR_RETURN(bool holds, Comparison(expr.ops[i], left, right));
    if (!holds) return Value::Bool(false);
    left = std::move(right);
  }
  return Value::Bool(true);
}

absl::StatusOr<Value> Renderer::EvaluateSlice(const ExprNode& expr) {
  TPSERVE_ASSIGN_OR_RETURN(Value obj, Evaluate(*expr.args[0]));
  std::optional<int64_t> bounds[3];
  for (int i = 0; i < 3; ++i) {
    if (expr.args[i + 1] == nullptr) continue;
    TPSERVE_ASSIGN_OR_RETURN(Value v, Evaluate(*expr.args[i + 1]));
    TPSERVE_ASSIGN_OR_RETURN(bounds[i], SliceBound(v));
  }
  return SliceOf(obj, bounds[0], bounds[1], bounds[2]);
}

}  // namespace tpserve::jinja
