// Walks a parsed template and produces its text: one Renderer per render call,
// on the calling thread, owning the scopes and values the render creates. The
// builtins (filters, tests, methods, globals) reach back into it to call
// macros and charge the render's budgets.
#ifndef TPSERVE_JINJA_RENDERER_H_
#define TPSERVE_JINJA_RENDERER_H_

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "jinja/ast.h"
#include "jinja/render_options.h"
#include "jinja/value.h"

namespace tpserve::jinja {

// Execute and Evaluate calls active at once: bounds the native stack whatever
// the template nests (macros included).
inline constexpr int kMaxRenderDepth = 1000;

// Variables of one frame: the template's top level, a loop iteration, a macro call.
class Scope {
 public:
  explicit Scope(std::shared_ptr<Scope> parent) : parent_(std::move(parent)) {}
  const Value* Find(std::string_view name) const;
  void Set(std::string_view name, Value value);

 private:
  std::shared_ptr<Scope> parent_;
  std::vector<std::pair<std::string, Value>> vars_;
};

class Renderer {
 public:
  Renderer(std::string_view template_name, const RenderOptions& options);

  // `context` is a dict of the render's variables.
  absl::StatusOr<std::string> Render(const StmtList& body, const Value& context);

  // Runs a macro's (or call block's) body in a new scope under `parent` with
  // its parameters bound from `args`; returns the text it rendered.
  absl::StatusOr<Value> CallMacro(const StmtNode& macro, const std::weak_ptr<Scope>& parent,
                                  CallArgs args, const Value* caller);
  absl::StatusOr<Value> CallValue(const Value& callee, CallArgs args);
  absl::StatusOr<Value> ApplyFilter(std::string_view name, const Value& input, const CallArgs& args);
  absl::StatusOr<bool> ApplyTest(std::string_view name, const Value& input, const CallArgs& args);

  // Budgets: `steps` of work, a string or container of `bytes`.
  absl::Status Charge(int64_t steps);
  absl::Status CheckSize(size_t bytes) const;
  const RenderOptions& options() const { return options_; }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  absl::Status ExecuteBody(const StmtList& body);
  // ExecuteBody in a scope of its own: what it sets stays inside.
  absl::Status ExecuteScoped(const StmtList& body);
  absl::Status Execute(const StmtNode& stmt);
  absl::Status ExecuteNode(const StmtNode& stmt);
  absl::Status ExecutePrint(const StmtNode& stmt);
  absl::Status ExecuteIf(const StmtNode& stmt);
  absl::Status ExecuteFilterBlock(const StmtNode& stmt);
  absl::Status ExecuteFor(const StmtNode& stmt);
  absl::Status ExecuteSet(const StmtNode& stmt);
  absl::Status ExecuteCallBlock(const StmtNode& stmt);
  absl::Status Assign(const AssignTarget& target, Value value, const StmtNode& at);
  // Renders `body` into a string of its own, in a scope of its own.
  absl::StatusOr<std::string> Capture(const StmtList& body);
  absl::Status Emit(std::string_view text);

  // Expressions (evaluate.cc).
  absl::StatusOr<Value> Evaluate(const ExprNode& expr);
  absl::StatusOr<Value> EvaluateNode(const ExprNode& expr);
  absl::StatusOr<Value> EvaluateSequence(const ExprNode& expr);
  absl::StatusOr<Value> EvaluateDict(const ExprNode& expr);
  absl::StatusOr<Value> EvaluateLookup(const ExprNode& expr);
  absl::StatusOr<Value> EvaluateTest(const ExprNode& expr);
  absl::StatusOr<Value> EvaluateOperator(const ExprNode& expr);
  absl::StatusOr<Value> EvaluateCondition(const ExprNode& expr);
  absl::StatusOr<Value> EvaluateName(const ExprNode& expr);
  absl::StatusOr<Value> EvaluateCall(const ExprNode& expr);
  absl::StatusOr<Value> EvaluateFilter(const ExprNode& expr);
  absl::StatusOr<Value> EvaluateCompare(const ExprNode& expr);
  absl::StatusOr<Value> EvaluateSlice(const ExprNode& expr);
  absl::StatusOr<CallArgs> EvaluateArgs(const ExprNode& expr, size_t first);
  // Applies a filter chain (a kFilter node whose innermost input is null) to `input`.
  absl::StatusOr<Value> ApplyFilterChain(const ExprNode& chain, Value input);

  // `status` with "name:line:column: " prefixed, unless it already has a place.
  absl::Status Locate(absl::Status status, int line, int column) const;

  std::string name_;
  const RenderOptions& options_;
  std::shared_ptr<Scope> scope_;
  std::string* out_ = nullptr;
  Flow flow_ = Flow::kNormal;
  size_t bytes_written_ = 0;
  int64_t steps_ = 0;
  int depth_ = 0;        // Execute/Evaluate calls active
  int macro_depth_ = 0;  // macro calls active
  const Value* filter_input_ = nullptr;  // input of the filter chain applied now
};

}  // namespace tpserve::jinja

#endif  // TPSERVE_JINJA_RENDERER_H_
