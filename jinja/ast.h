// The parsed form of a template: expression and statement trees the parser
// builds and the renderer walks. Trees are immutable after parsing and owned
// by the template; renders share them across threads.
#ifndef TPSERVE_JINJA_AST_H_
#define TPSERVE_JINJA_AST_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/value.h"

namespace tpserve::jinja {

struct ExprNode;
struct StmtNode;
using ExprPtr = std::unique_ptr<ExprNode>;
using StmtPtr = std::unique_ptr<StmtNode>;
using StmtList = std::vector<StmtPtr>;

struct ExprNode {
  enum class Kind {
    kLiteral,   // literal
    kName,      // name
    kList,      // args: items
    kTuple,     // args: items
    kDict,      // args: key, value, key, value, ...
    kAttr,      // args[0].name
    kItem,      // args[0][args[1]]
    kSlice,     // args[0][args[1]:args[2]:args[3]], each bound may be null
    kCall,      // args[0](args[1:], kwargs)
    kFilter,    // args[0] | name(args[1:], kwargs); args[0] null inside filter blocks
    kTest,      // args[0] is name(args[1:], kwargs)
    kUnary,     // name: "-", "+" or "not"; args[0]
    kBinary,    // name: "+", "-", "*", "/", "//", "%", "**", "~", "and", "or"
    kCompare,   // args[0] ops[0] args[1] ops[1] args[2] ...
    kCondition, // args[1] if args[0] else args[2] (null: undefined)
  };
  Kind kind = Kind::kLiteral;
  int line = 0;
  int column = 0;
  int depth = 1;  // height of the tree below, bounded by the parser
  Value literal;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;  // "*": *args, "**": **kwargs
  std::vector<std::string> ops;  // "==", "!=", "<", "<=", ">", ">=", "in", "notin"
};

// What for and set assign to: a name, a tuple of targets, or ns.attr.
struct AssignTarget {
  enum class Kind { kName, kTuple, kAttribute };
  Kind kind = Kind::kName;
  std::string name;  // the name, or the namespace's name
  std::string attr;
  std::vector<AssignTarget> items;
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null: none
};

struct StmtNode {
  enum class Kind {
    kText,         // text
    kPrint,        // {{ expr }}
    kIf,           // branches: (condition, body), the else branch with a null condition
    kFor,          // for target in expr [if condition]: body [else: else_body]
    kSet,          // set target = expr
    kSetBlock,     // set target [| expr]: body
    kMacro,        // macro name(params): body
    kCallBlock,    // call(params) expr: body, given to the callee as caller()
    kFilterBlock,  // filter expr: body; expr's innermost filter has a null input
    kScope,        // body as is (generation, with's body after its assignments)
    kBreak,
    kContinue,
  };
  Kind kind = Kind::kText;
  int line = 0;
  int column = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr condition;
  AssignTarget target;
  std::vector<std::pair<ExprPtr, StmtList>> branches;
  std::string name;
  std::vector<MacroParam> params;
  StmtList body;
  StmtList else_body;
};

}  // namespace tpserve::jinja

#endif  // TPSERVE_JINJA_AST_H_
