// Expressions, by jinja2's precedence from loosest to tightest: conditional,
// or, and, not, comparisons, + -, ~, * / // %, **, unary - +, then primaries
// with their postfixes (attribute, subscript, call) and filters and tests.
#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "jinja/parser.h"

namespace tpserve::jinja {
namespace {

using Type = LexToken::Type;
using Kind = ExprNode::Kind;

bool IsCompareOperator(const LexToken& t) {
  if (t.type != Type::kOperator) return false;
  return t.text == "==" || t.text == "!=" || t.text == "<" || t.text == "<=" || t.text == ">" ||
         t.text == ">=";
}

}  // namespace

ExprPtr TemplateParser::MakeNode(ExprNode::Kind kind, const LexToken& at) const {
  auto node = std::make_unique<ExprNode>();
  node->kind = kind;
  node->line = at.line;
  node->column = at.column;
  return node;
}

absl::StatusOr<ExprPtr> TemplateParser::Finish(ExprPtr node) const {
  int depth = 0;
  for (const ExprPtr& child : node->args) {
    if (child != nullptr) depth = std::max(depth, child->depth);
  }
  for (const auto& [name, child] : node->kwargs) depth = std::max(depth, child->depth);
  node->depth = depth + 1;
  if (node->depth > kMaxExprDepth) {
    return absl::InvalidArgumentError(absl::StrCat(name_, ":", node->line, ":", node->column,
                                                   ": expression nests too deeply"));
  }
  return node;
}

absl::StatusOr<ExprPtr> TemplateParser::ParseTuple(bool with_condition, const EndTags& extra_end,
                                                   bool explicit_parens) {
  const LexToken& start = Current();
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty()) TPSERVE_RETURN_IF_ERROR(ExpectOperator(","));
    if (AtTupleEnd(extra_end)) break;
    TPSERVE_ASSIGN_OR_RETURN(ExprPtr item, with_condition ? ParseExpression() : ParseOr());
    items.push_back(std::move(item));
    if (IsOperator(",")) {
      is_tuple = true;
    } else {
      break;
    }
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items[0]);
    if (!explicit_parens) {
      return Error(Current(), absl::StrCat("expected an expression, got ", Describe(Current())));
    }
  }
  ExprPtr tuple = MakeNode(Kind::kTuple, start);
  tuple->args = std::move(items);
  return Finish(std::move(tuple));
}

absl::StatusOr<ExprPtr> TemplateParser::ParseExpression() {
  if (++nesting_ > kMaxNesting) return Error(Current(), "expression nests too deeply");
  TPSERVE_ASSIGN_OR_RETURN(ExprPtr node, ParseCondition());
  --nesting_;
  return node;
}

absl::StatusOr<ExprPtr> TemplateParser::ParseCondition() {
  TPSERVE_ASSIGN_OR_RETURN(ExprPtr node, ParseOr());
  while (IsName("if")) {
    ExprPtr cond = MakeNode(Kind::kCondition, Current());
    Advance();
    TPSERVE_ASSIGN_OR_RETURN(ExprPtr test, ParseOr());
    ExprPtr otherwise;
    if (SkipName("else")) {
      if (++nesting_ > kMaxNesting) return Error(Current(), "expression nests too deeply");
      TPSERVE_ASSIGN_OR_RETURN(otherwise, ParseCondition());
      --nesting_;
    }
    cond->args.push_back(std::move(test));
    cond->args.push_back(std::move(node));
    cond->args.push_back(std::move(otherwise));
    TPSERVE_ASSIGN_OR_RETURN(node, Finish(std::move(cond)));
  }
  return node;
}

absl::StatusOr<ExprPtr> TemplateParser::ParseOr() {
  TPSERVE_ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
  while (IsName("or")) {
    ExprPtr node = MakeNode(Kind::kBinary, Current());
    node->name = "or";
    Advance();
    TPSERVE_ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
    node->args.push_back(std::move(left));
    node->args.push_back(std::move(right));
    TPSERVE_ASSIGN_OR_RETURN(left, Finish(std::move(node)));
  }
  return left;
}

absl::StatusOr<ExprPtr> TemplateParser::ParseAnd() {
  TPSERVE_ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
  while (IsName("and")) {
    ExprPtr node = MakeNode(Kind::kBinary, Current());
    node->name = "and";
    Advance();
    TPSERVE_ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
    node->args.push_back(std::move(left));
    node->args.push_back(std::move(right));
    TPSERVE_ASSIGN_OR_RETURN(left, Finish(std::move(node)));
  }
  return left;
}

absl::StatusOr<ExprPtr> TemplateParser::ParseNot() {
  if (!IsName("not")) return ParseCompare();
  if (++nesting_ > kMaxNesting) return Error(Current(), "expression nests too deeply");
  ExprPtr node = MakeNode(Kind::kUnary, Current());
  node->name = "not";
  Advance();
  TPSERVE_ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
  --nesting_;
  node->args.push_back(std::move(operand));
  return Finish(std::move(node));
}

absl::StatusOr<ExprPtr> TemplateParser::ParseCompare() {
  const LexToken& start = Current();
  TPSERVE_ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
  ExprPtr node = MakeNode(Kind::kCompare, start);
  node->args.push_back(std::move(first));
  while (true) {
    std::string op;
    if (IsCompareOperator(Current())) {
      op = Current().text;
      Advance();
    } else if (SkipName("in")) {
      op = "in";
    } else if (IsName("not") && Peek().type == Type::kName && Peek().text == "in") {
      Advance();
      Advance();
      op = "notin";
    } else {
      break;
    }
    TPSERVE_ASSIGN_OR_RETURN(ExprPtr operand, ParseMath1());
    node->ops.push_back(op);
    node->args.push_back(std::move(operand));
  }
  if (node->ops.empty()) return std::move(node->args[0]);
  return Finish(std::move(node));
}

absl::StatusOr<ExprPtr> TemplateParser::ParseMath1() {
  TPSERVE_ASSIGN_OR_RETURN(ExprPtr left, ParseConcat());
  while (IsOperator("+") || IsOperator("-")) {
    ExprPtr node = MakeNode(Kind::kBinary, Current());
    node->name = Current().text;
    Advance();
    TPSERVE_ASSIGN_OR_RETURN(ExprPtr right, ParseConcat());
    node->args.push_back(std::move(left));
    node->args.push_back(std::move(right));
    TPSERVE_ASSIGN_OR_RETURN(left, Finish(std::move(node)));
  }
  return left;
}

absl::StatusOr<ExprPtr> TemplateParser::ParseConcat() {
  TPSERVE_ASSIGN_OR_RETURN(ExprPtr left, ParseMath2());
  while (IsOperator("~")) {
    ExprPtr node = MakeNode(Kind::kBinary, Current());
    node->name = "~";
    Advance();
    TPSERVE_ASSIGN_OR_RETURN(ExprPtr right, ParseMath2());
    node->args.push_back(std::move(left));
    node->args.push_back(std::move(right));
    TPSERVE_ASSIGN_OR_RETURN(left, Finish(std::move(node)));
  }
  return left;
}

absl::StatusOr<ExprPtr> TemplateParser::ParseMath2() {
  TPSERVE_ASSIGN_OR_RETURN(ExprPtr left, ParsePow());
  while (IsOperator("*") || IsOperator("/") || IsOperator("//") || IsOperator("%")) {
    ExprPtr node = MakeNode(Kind::kBinary, Current());
    node->name = Current().text;
    Advance();
    TPSERVE_ASSIGN_OR_RETURN(ExprPtr right, ParsePow());
    node->args.push_back(std::move(left));
    node->args.push_back(std::move(right));
    TPSERVE_ASSIGN_OR_RETURN(left, Finish(std::move(node)));
  }
  return left;
}

absl::StatusOr<ExprPtr> TemplateParser::ParsePow() {
  TPSERVE_ASSIGN_OR_RETURN(ExprPtr left, ParseUnary(true));
  while (IsOperator("**")) {
    ExprPtr node = MakeNode(Kind::kBinary, Current());
    node->name = "**";
    Advance();
    TPSERVE_ASSIGN_OR_RETURN(ExprPtr right, ParseUnary(true));
    node->args.push_back(std::move(left));
    node->args.push_back(std::move(right));
    TPSERVE_ASSIGN_OR_RETURN(left, Finish(std::move(node)));
  }
  return left;
}

absl::StatusOr<ExprPtr> TemplateParser::ParseUnary(bool with_filter) {
  ExprPtr node;
  if (IsOperator("-") || IsOperator("+")) {
    if (++nesting_ > kMaxNesting) return Error(Current(), "expression nests too deeply");
    node = MakeNode(Kind::kUnary, Current());
    node->name = Current().text;
    Advance();
    TPSERVE_ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(false));
    --nesting_;
    node->args.push_back(std::move(operand));
    TPSERVE_ASSIGN_OR_RETURN(node, Finish(std::move(node)));
  } else {
    TPSERVE_ASSIGN_OR_RETURN(node, ParsePrimary());
  }
  TPSERVE_ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
  if (with_filter) {
    TPSERVE_ASSIGN_OR_RETURN(node, ParseFilterExpr(std::move(node)));
  }
  return node;
}

absl::StatusOr<ExprPtr> TemplateParser::ParsePrimary() {
  const LexToken& token = Current();
  switch (token.type) {
    case Type::kName: {
      ExprPtr node = MakeNode(Kind::kLiteral, token);
      const std::string& n = token.text;
      if (n == "true" || n == "True") node->literal = Value::Bool(true);
      else if (n == "false" || n == "False") node->literal = Value::Bool(false);
      else if (n == "none" || n == "None") node->literal = Value::None();
      else {
        node->kind = Kind::kName;
        node->name = n;
      }
      Advance();
      return node;
    }
    case Type::kString: {
      ExprPtr node = MakeNode(Kind::kLiteral, token);
      std::string text;
      while (Current().type == Type::kString) {
        text += Current().text;
        Advance();
      }
      node->literal = Value::String(std::move(text));
      return node;
    }
    case Type::kInteger: case Type::kFloat: {
      ExprPtr node = MakeNode(Kind::kLiteral, token);
      node->literal = token.type == Type::kInteger ? Value::Int(token.int_value)
                                                   : Value::Float(token.float_value);
      Advance();
      return node;
    }
    case Type::kOperator:
      if (token.text == "(") {
        Advance();
        if (++nesting_ > kMaxNesting) return Error(token, "expression nests too deeply");
        TPSERVE_ASSIGN_OR_RETURN(ExprPtr node, ParseTuple(true, {}, true));
        --nesting_;
        TPSERVE_RETURN_IF_ERROR(ExpectOperator(")"));
        return node;
      }
      if (token.text == "[") return ParseList();
      if (token.text == "{") return ParseDict();
      return Unexpected(token);
    default:
      return Error(token, absl::StrCat("expected an expression, got ", Describe(token)));
  }
}

absl::StatusOr<ExprPtr> TemplateParser::ParseList() {
  ExprPtr node = MakeNode(Kind::kList, Current());
  Advance();
  if (++nesting_ > kMaxNesting) return Error(Current(), "expression nests too deeply");
  while (!IsOperator("]")) {
    if (!node->args.empty()) TPSERVE_RETURN_IF_ERROR(ExpectOperator(","));
    if (IsOperator("]")) break;
    TPSERVE_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression());
    node->args.push_back(std::move(item));
  }
  --nesting_;
  Advance();
  return Finish(std::move(node));
}

absl::StatusOr<ExprPtr> TemplateParser::ParseDict() {
  ExprPtr node = MakeNode(Kind::kDict, Current());
  Advance();
  if (++nesting_ > kMaxNesting) return Error(Current(), "expression nests too deeply");
  while (!IsOperator("}")) {
    if (!node->args.empty()) TPSERVE_RETURN_IF_ERROR(ExpectOperator(","));
    if (IsOperator("}")) break;
    TPSERVE_ASSIGN_OR_RETURN(ExprPtr key, ParseExpression());
    TPSERVE_RETURN_IF_ERROR(ExpectOperator(":"));
    TPSERVE_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
    node->args.push_back(std::move(key));
    node->args.push_back(std::move(value));
  }
  --nesting_;
  Advance();
  return Finish(std::move(node));
}

absl::StatusOr<ExprPtr> TemplateParser::ParsePostfix(ExprPtr node) {
  while (true) {
    if (IsOperator(".") || IsOperator("[")) {
      TPSERVE_ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node)));
    } else if (IsOperator("(")) {
      ExprPtr call = MakeNode(Kind::kCall, Current());
      call->args.push_back(std::move(node));
      TPSERVE_RETURN_IF_ERROR(ParseCallArgs(call.get()));
      TPSERVE_ASSIGN_OR_RETURN(node, Finish(std::move(call)));
    } else {
      return node;
    }
  }
}

absl::StatusOr<ExprPtr> TemplateParser::ParseFilterExpr(ExprPtr node) {
  while (true) {
    if (SkipOperator("|")) {
      TPSERVE_ASSIGN_OR_RETURN(node, ParseFilter(std::move(node)));
    } else if (IsName("is")) {
      TPSERVE_ASSIGN_OR_RETURN(node, ParseTest(std::move(node)));
    } else if (IsOperator("(")) {
      ExprPtr call = MakeNode(Kind::kCall, Current());
      call->args.push_back(std::move(node));
      TPSERVE_RETURN_IF_ERROR(ParseCallArgs(call.get()));
      TPSERVE_ASSIGN_OR_RETURN(node, Finish(std::move(call)));
    } else {
      return node;
    }
  }
}

absl::StatusOr<ExprPtr> TemplateParser::ParseSubscript(ExprPtr node) {
  const LexToken& token = Current();
  Advance();
  if (token.text == ".") {
    const LexToken& attr = Current();
    if (attr.type == Type::kName) {
      ExprPtr get = MakeNode(Kind::kAttr, token);
      get->name = attr.text;
      get->args.push_back(std::move(node));
      Advance();
      return Finish(std::move(get));
    }
    if (attr.type != Type::kInteger) {
      return Error(attr, absl::StrCat("expected name or number, got ", Describe(attr)));
    }
    ExprPtr get = MakeNode(Kind::kItem, token);
    get->args.push_back(std::move(node));
    ExprPtr index = MakeNode(Kind::kLiteral, attr);
    index->literal = Value::Int(attr.int_value);
    get->args.push_back(std::move(index));
    Advance();
    return Finish(std::move(get));
  }
  if (++nesting_ > kMaxNesting) return Error(token, "expression nests too deeply");
  std::vector<ExprPtr> subs;
  while (!IsOperator("]")) {
    if (!subs.empty()) TPSERVE_RETURN_IF_ERROR(ExpectOperator(","));
    TPSERVE_ASSIGN_OR_RETURN(ExprPtr sub, ParseSubscribed());
    subs.push_back(std::move(sub));
  }
  --nesting_;
  Advance();
  if (subs.empty()) return Error(token, "expected an expression, got ']'");
  ExprPtr index;
  if (subs.size() == 1) {
    index = std::move(subs[0]);
  } else {
    index = MakeNode(Kind::kTuple, token);
    index->args = std::move(subs);
    TPSERVE_ASSIGN_OR_RETURN(index, Finish(std::move(index)));
  }
  if (index->kind == Kind::kSlice && index->args[0] == nullptr) {
    index->args[0] = std::move(node);  // ParseSubscribed leaves the object's slot empty
    return Finish(std::move(index));
  }
  ExprPtr get = MakeNode(Kind::kItem, token);
  get->args.push_back(std::move(node));
  get->args.push_back(std::move(index));
  return Finish(std::move(get));
}

absl::StatusOr<ExprPtr> TemplateParser::ParseSubscribed() {
  const LexToken& start = Current();
  ExprPtr lower;
  if (!IsOperator(":")) {
    TPSERVE_ASSIGN_OR_RETURN(lower, ParseExpression());
    if (!IsOperator(":")) return lower;
  }
  Advance();
  ExprPtr slice = MakeNode(Kind::kSlice, start);
  slice->args.resize(4);
  slice->args[1] = std::move(lower);
  if (!IsOperator("]") && !IsOperator(",") && !IsOperator(":")) {
    TPSERVE_ASSIGN_OR_RETURN(slice->args[2], ParseExpression());
  }
  if (SkipOperator(":") && !IsOperator("]") && !IsOperator(",")) {
    TPSERVE_ASSIGN_OR_RETURN(slice->args[3], ParseExpression());
  }
  return slice;
}

absl::StatusOr<std::string> TemplateParser::ParseDottedName() {
  TPSERVE_ASSIGN_OR_RETURN(std::string name, ExpectName());
  while (IsOperator(".") && Peek().type == Type::kName) {
    Advance();
    absl::StrAppend(&name, ".", Current().text);
    Advance();
  }
  return name;
}

absl::StatusOr<ExprPtr> TemplateParser::ParseFilter(ExprPtr node) {
  ExprPtr filter = MakeNode(Kind::kFilter, Current());
  TPSERVE_ASSIGN_OR_RETURN(filter->name, ParseDottedName());
  filter->args.push_back(std::move(node));
  if (IsOperator("(")) TPSERVE_RETURN_IF_ERROR(ParseCallArgs(filter.get()));
  return Finish(std::move(filter));
}

absl::StatusOr<ExprPtr> TemplateParser::ParseTest(ExprPtr node) {
  ExprPtr test = MakeNode(Kind::kTest, Current());
  Advance();  // is
  const bool negated = SkipName("not");
  TPSERVE_ASSIGN_OR_RETURN(test->name, ParseDottedName());
  test->args.push_back(std::move(node));
  const LexToken& next = Current();
  if (IsOperator("(")) {
    TPSERVE_RETURN_IF_ERROR(ParseCallArgs(test.get()));
  } else if ((next.type == Type::kName || next.type == Type::kString ||
              next.type == Type::kInteger || next.type == Type::kFloat ||
              (next.type == Type::kOperator &&
               (next.text == "[" || next.text == "{"))) &&
             !IsName("else") && !IsName("or") && !IsName("and")) {
    if (IsName("is")) return Error(next, "You cannot chain multiple tests with is");
    TPSERVE_ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
    TPSERVE_ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
    test->args.push_back(std::move(arg));
  }
  TPSERVE_ASSIGN_OR_RETURN(test, Finish(std::move(test)));
  if (!negated) return test;
  ExprPtr negation = MakeNode(Kind::kUnary, next);
  negation->name = "not";
  negation->args.push_back(std::move(test));
  return Finish(std::move(negation));
}

absl::Status TemplateParser::ParseCallArgs(ExprNode* call) {
  const LexToken& open = Current();
  TPSERVE_RETURN_IF_ERROR(ExpectOperator("("));
  if (++nesting_ > kMaxNesting) return Error(open, "expression nests too deeply");
  bool first = true;
  while (!IsOperator(")")) {
    if (!first) TPSERVE_RETURN_IF_ERROR(ExpectOperator(","));
    first = false;
    if (IsOperator(")")) break;
    if (IsOperator("*") || IsOperator("**")) {
      // Kept among the keyword arguments under the name "*" or "**".
      std::string splat = Current().text;
      Advance();
      TPSERVE_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
      call->kwargs.emplace_back(std::move(splat), std::move(value));
      continue;
    }
    if (Current().type == Type::kName && Peek().type == Type::kOperator && Peek().text == "=") {
      std::string key = Current().text;
      Advance();
      Advance();
      TPSERVE_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
      call->kwargs.emplace_back(std::move(key), std::move(value));
      continue;
    }
    if (!call->kwargs.empty() && call->kwargs.back().first != "*") {
      return Error(Current(), "invalid syntax for function call expression");
    }
    TPSERVE_ASSIGN_OR_RETURN(ExprPtr arg, ParseExpression());
    call->args.push_back(std::move(arg));
  }
  --nesting_;
  Advance();
  return absl::OkStatus();
}

}  // namespace tpserve::jinja
