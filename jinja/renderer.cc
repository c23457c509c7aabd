#include "jinja/renderer.h"

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "jinja/globals.h"
#include "jinja/json_convert.h"
#include "jinja/operators.h"

namespace tpserve::jinja {
namespace {

// A macro, or a call block's body handed to the callee as caller().
class MacroCallable : public Callable {
 public:
  MacroCallable(const StmtNode* macro, std::weak_ptr<Scope> scope)
      : macro_(macro), scope_(std::move(scope)) {}

  absl::StatusOr<Value> Call(Renderer& renderer, CallArgs args) const override {
    return renderer.CallMacro(*macro_, scope_, std::move(args), nullptr);
  }
  std::string Describe() const override {
    return absl::StrCat("<Macro '", macro_->name.empty() ? "caller" : macro_->name, "'>");
  }

 private:
  const StmtNode* macro_;
  std::weak_ptr<Scope> scope_;
};

class LoopCycle : public Callable {
 public:
  explicit LoopCycle(size_t index) : index_(index) {}
  absl::StatusOr<Value> Call(Renderer&, CallArgs args) const override {
    if (args.positional.empty()) return absl::InvalidArgumentError("no items for cycling given");
    return args.positional[index_ % args.positional.size()];
  }
  std::string Describe() const override { return "<bound method LoopContext.cycle>"; }

 private:
  size_t index_;
};

Value LoopValue(size_t index, const ValueList& items) {
  const size_t n = items.size();
  ValueMap loop;
  auto set = [&loop](const char* key, Value v) { loop.Set(Value::String(key), std::move(v)); };
  set("index", Value::Int(static_cast<int64_t>(index + 1)));
  set("index0", Value::Int(static_cast<int64_t>(index)));
  set("revindex", Value::Int(static_cast<int64_t>(n - index)));
  set("revindex0", Value::Int(static_cast<int64_t>(n - index - 1)));
  set("first", Value::Bool(index == 0));
  set("last", Value::Bool(index + 1 == n));
  set("length", Value::Int(static_cast<int64_t>(n)));
  set("depth", Value::Int(1));
  set("depth0", Value::Int(0));
  set("previtem", index > 0 ? items[index - 1] : Value::Undefined("there is no previous item"));
  set("nextitem", index + 1 < n ? items[index + 1] : Value::Undefined("there is no next item"));
  set("cycle", Value::Function(std::make_shared<LoopCycle>(index)));
  return Value::Dict(std::move(loop));
}

constexpr char kLocatedPayload[] = "tpserve.jinja/located";

}  // namespace

const Value* Scope::Find(std::string_view name) const {
  for (const Scope* s = this; s != nullptr; s = s->parent_.get()) {
    for (auto it = s->vars_.rbegin(); it != s->vars_.rend(); ++it) {
      if (it->first == name) return &it->second;
    }
  }
  return nullptr;
}

void Scope::Set(std::string_view name, Value value) {
  for (auto& [key, v] : vars_) {
    if (key == name) {
      v = std::move(value);
      return;
    }
  }
  vars_.emplace_back(std::string(name), std::move(value));
}

Renderer::Renderer(std::string_view template_name, const RenderOptions& options)
    : name_(template_name), options_(options) {}

absl::StatusOr<std::string> Renderer::Render(const StmtList& body, const Value& context) {
  scope_ = std::make_shared<Scope>(nullptr);
  for (const auto& [key, value] : context.AsMap().entries()) {
    if (key.is_string()) scope_->Set(key.AsString(), value);
  }
  std::string out;
  out_ = &out;
  TPSERVE_RETURN_IF_ERROR(ExecuteBody(body));
  return out;
}

absl::Status Renderer::Charge(int64_t steps) {
  steps_ += steps;
  if (steps_ > options_.max_steps) {
    return absl::InvalidArgumentError(
        absl::StrCat("render exceeds its budget of ", options_.max_steps, " steps"));
  }
  return absl::OkStatus();
}

absl::Status Renderer::CheckSize(size_t bytes) const {
  if (bytes > options_.max_output_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a string exceeds the output budget of ", options_.max_output_bytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status Renderer::Emit(std::string_view text) {
  bytes_written_ += text.size();
  if (bytes_written_ > options_.max_output_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("output exceeds ", options_.max_output_bytes, " bytes"));
  }
  out_->append(text);
  return absl::OkStatus();
}

absl::Status Renderer::Locate(absl::Status status, int line, int column) const {
  if (status.ok() || status.GetPayload(kLocatedPayload).has_value()) return status;
  absl::Status located(status.code(),
                       absl::StrCat(name_, ":", line, ":", column, ": ", status.message()));
  located.SetPayload(kLocatedPayload, absl::Cord("1"));
  return located;
}

absl::Status Renderer::ExecuteBody(const StmtList& body) {
  for (const StmtPtr& stmt : body) {
    TPSERVE_RETURN_IF_ERROR(Execute(*stmt));
    if (flow_ != Flow::kNormal) break;
  }
  return absl::OkStatus();
}

absl::Status Renderer::ExecuteScoped(const StmtList& body) {
  std::shared_ptr<Scope> outer = scope_;
  scope_ = std::make_shared<Scope>(outer);
  absl::Status status = ExecuteBody(body);
  scope_ = outer;
  return status;
}

absl::StatusOr<std::string> Renderer::Capture(const StmtList& body) {
  std::string text;
  std::string* outer = out_;
  out_ = &text;
  absl::Status status = ExecuteScoped(body);
  out_ = outer;
  if (!status.ok()) return status;
  return text;
}

absl::Status Renderer::Execute(const StmtNode& stmt) {
  absl::Status status = Charge(1);
  ++depth_;
  if (status.ok() && depth_ > kMaxRenderDepth) {
    status = absl::InvalidArgumentError("template nests too deeply when rendered");
  }
  if (status.ok()) status = ExecuteNode(stmt);
  --depth_;
  return Locate(status, stmt.line, stmt.column);
}

// Each kind in a function of its own keeps this frame, which every nesting
// level of the template repeats on the stack, small.
absl::Status Renderer::ExecuteNode(const StmtNode& stmt) {
  switch (stmt.kind) {
    case StmtNode::Kind::kText: return Emit(stmt.text);
    case StmtNode::Kind::kPrint: return ExecutePrint(stmt);
    case StmtNode::Kind::kIf: return ExecuteIf(stmt);
    case StmtNode::Kind::kFor: return ExecuteFor(stmt);
    case StmtNode::Kind::kSet: case StmtNode::Kind::kSetBlock: return ExecuteSet(stmt);
    case StmtNode::Kind::kMacro:
      scope_->Set(stmt.name, Value::Function(std::make_shared<MacroCallable>(&stmt, scope_)));
      return absl::OkStatus();
    case StmtNode::Kind::kCallBlock: return ExecuteCallBlock(stmt);
    case StmtNode::Kind::kFilterBlock: return ExecuteFilterBlock(stmt);
    case StmtNode::Kind::kScope: return ExecuteScoped(stmt.body);
    case StmtNode::Kind::kBreak: flow_ = Flow::kBreak; return absl::OkStatus();
    case StmtNode::Kind::kContinue: flow_ = Flow::kContinue; return absl::OkStatus();
  }
  return absl::OkStatus();
}

absl::Status Renderer::ExecutePrint(const StmtNode& stmt) {
  TPSERVE_ASSIGN_OR_RETURN(Value v, Evaluate(*stmt.expr));
  return Emit(v.Str());
}

absl::Status Renderer::ExecuteIf(const StmtNode& stmt) {
  for (const auto& [condition, body] : stmt.branches) {
    bool taken = condition == nullptr;
    if (!taken) {
      TPSERVE_ASSIGN_OR_RETURN(Value v, Evaluate(*condition));
      taken = v.Truthy();
    }
    if (taken) return ExecuteBody(body);
  }
  return absl::OkStatus();
}

absl::Status Renderer::ExecuteFilterBlock(const StmtNode& stmt) {
  TPSERVE_ASSIGN_OR_RETURN(std::string text, Capture(stmt.body));
  TPSERVE_ASSIGN_OR_RETURN(Value v, ApplyFilterChain(*stmt.expr, Value::String(std::move(text))));
  return Emit(v.Str());
}

absl::Status Renderer::ExecuteFor(const StmtNode& stmt) {
  TPSERVE_ASSIGN_OR_RETURN(Value iterable, Evaluate(*stmt.expr));
  absl::StatusOr<ValueList> all = Iterate(iterable);
  if (!all.ok()) return Locate(all.status(), stmt.expr->line, stmt.expr->column);
  TPSERVE_RETURN_IF_ERROR(Charge(static_cast<int64_t>(all->size())));
  std::shared_ptr<Scope> outer = scope_;
  ValueList items;
  if (stmt.condition == nullptr) {
    items = std::move(*all);
  } else {
    for (Value& item : *all) {
      scope_ = std::make_shared<Scope>(outer);
      absl::Status assigned = Assign(stmt.target, item, stmt);
      absl::StatusOr<Value> keep = assigned.ok() ? Evaluate(*stmt.condition) : assigned;
      scope_ = outer;
      if (!keep.ok()) return keep.status();
      if (keep->Truthy()) items.push_back(std::move(item));
    }
  }
  for (size_t i = 0; i < items.size(); ++i) {
    scope_ = std::make_shared<Scope>(outer);
    scope_->Set("loop", LoopValue(i, items));
    absl::Status status = Assign(stmt.target, items[i], stmt);
    if (status.ok()) status = ExecuteBody(stmt.body);
    scope_ = outer;
    TPSERVE_RETURN_IF_ERROR(status);
    const Flow flow = flow_;
    flow_ = Flow::kNormal;
    if (flow == Flow::kBreak) break;
  }
  if (items.empty()) return ExecuteScoped(stmt.else_body);
  return absl::OkStatus();
}

absl::Status Renderer::ExecuteSet(const StmtNode& stmt) {
  Value value;
  if (stmt.kind == StmtNode::Kind::kSet) {
    TPSERVE_ASSIGN_OR_RETURN(value, Evaluate(*stmt.expr));
  } else {
    TPSERVE_ASSIGN_OR_RETURN(std::string text, Capture(stmt.body));
    value = Value::String(std::move(text));
    if (stmt.expr != nullptr) {
      TPSERVE_ASSIGN_OR_RETURN(value, ApplyFilterChain(*stmt.expr, value));
    }
  }
  return Assign(stmt.target, std::move(value), stmt);
}

absl::Status Renderer::Assign(const AssignTarget& target, Value value, const StmtNode& at) {
  switch (target.kind) {
    case AssignTarget::Kind::kName:
      scope_->Set(target.name, std::move(value));
      return absl::OkStatus();
    case AssignTarget::Kind::kTuple: {
      TPSERVE_ASSIGN_OR_RETURN(ValueList items, Iterate(value));
      const size_t want = target.items.size();
      if (items.size() > want) {
        return absl::InvalidArgumentError(absl::StrCat("too many values to unpack (expected ", want, ")"));
      }
      if (items.size() < want) {
        return absl::InvalidArgumentError(absl::StrCat(
            "not enough values to unpack (expected ", want, ", got ", items.size(), ")"));
      }
      for (size_t i = 0; i < want; ++i) TPSERVE_RETURN_IF_ERROR(Assign(target.items[i], items[i], at));
      return absl::OkStatus();
    }
    case AssignTarget::Kind::kAttribute: {
      const Value* ns = scope_->Find(target.name);
      if (ns == nullptr || !ns->is_namespace()) {
        return absl::InvalidArgumentError("cannot assign attribute on non-namespace object");
      }
      if (!target.attr.empty() && target.attr[0] == '_') {
        return absl::InvalidArgumentError(absl::StrCat(
            "Chat templates cannot store underscore-prefixed attributes on a namespace, but got '",
            target.attr, "'. Please rename the attribute."));
      }
      if (value.holds_namespace()) {
        return absl::InvalidArgumentError("a namespace attribute cannot hold a namespace");
      }
      if (value.depth() >= kMaxValueDepth) {
        return absl::InvalidArgumentError("value nests too deeply");
      }
      ns->MutableNamespace().Set(Value::String(target.attr), std::move(value));
      return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

absl::Status Renderer::ExecuteCallBlock(const StmtNode& stmt) {
  const ExprNode& call = *stmt.expr;
  TPSERVE_ASSIGN_OR_RETURN(Value callee, Evaluate(*call.args[0]));
  TPSERVE_ASSIGN_OR_RETURN(CallArgs args, EvaluateArgs(call, 1));
  args.named.emplace_back("caller", Value::Function(std::make_shared<MacroCallable>(&stmt, scope_)));
  absl::StatusOr<Value> result = CallValue(callee, std::move(args));
  if (!result.ok()) return Locate(result.status(), call.line, call.column);
  return Emit(result->Str());
}

absl::StatusOr<Value> Renderer::CallMacro(const StmtNode& macro, const std::weak_ptr<Scope>& parent,
                                          CallArgs args, const Value* caller) {
  std::shared_ptr<Scope> parent_scope = parent.lock();
  if (parent_scope == nullptr) return absl::InvalidArgumentError("the macro's scope has ended");
  if (macro_depth_ >= options_.max_macro_depth) {
    return absl::InvalidArgumentError(
        absl::StrCat("macro calls nest deeper than ", options_.max_macro_depth));
  }
  const std::string shown = macro.name.empty() ? "caller" : macro.name;
  if (args.positional.size() > macro.params.size()) {
    return absl::InvalidArgumentError(absl::StrCat("macro '", shown, "' takes not more than ",
                                                   macro.params.size(), " argument(s)"));
  }
  std::shared_ptr<Scope> outer = scope_;
  scope_ = std::make_shared<Scope>(parent_scope);
  ++macro_depth_;
  absl::Status status;
  ValueMap extra;
  for (auto& [key, value] : args.named) {
    if (key == "caller") {
      scope_->Set("caller", value);
      continue;
    }
    bool known = false;
    for (const MacroParam& param : macro.params) known = known || param.name == key;
    if (!known) extra.Set(Value::String(key), value);
  }
  scope_->Set("kwargs", Value::Dict(std::move(extra)));
  scope_->Set("varargs", Value::Tuple({}));
  if (caller != nullptr) scope_->Set("caller", *caller);
  for (size_t i = 0; i < macro.params.size() && status.ok(); ++i) {
    const MacroParam& param = macro.params[i];
    const Value* given = args.Get(i, param.name);
    if (given != nullptr) {
      scope_->Set(param.name, *given);
    } else if (param.default_value != nullptr) {
      absl::StatusOr<Value> v = Evaluate(*param.default_value);
      if (v.ok()) scope_->Set(param.name, *std::move(v));
      status = v.status();
    } else {
      scope_->Set(param.name, Value::Undefined(absl::StrCat("parameter '", param.name, "' was not provided")));
    }
  }
  std::string text;
  if (status.ok()) {
    std::string* outer_out = out_;
    out_ = &text;
    status = ExecuteBody(macro.body);
    out_ = outer_out;
    flow_ = Flow::kNormal;
  }
  --macro_depth_;
  scope_ = outer;
  if (!status.ok()) return status;
  return Value::String(std::move(text));
}

}  // namespace tpserve::jinja
