#include "jinja/parser.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace tpserve::jinja {
namespace {

using Type = LexToken::Type;

StmtPtr MakeStmt(StmtNode::Kind kind, const LexToken& at) {
  auto stmt = std::make_unique<StmtNode>();
  stmt->kind = kind;
  stmt->line = at.line;
  stmt->column = at.column;
  return stmt;
}

bool Contains(const std::vector<std::string_view>& tags, std::string_view tag) {
  return std::find(tags.begin(), tags.end(), tag) != tags.end();
}

std::string JoinTags(const std::vector<std::string_view>& tags) {
  std::string out;
  for (size_t i = 0; i < tags.size(); ++i) {
    absl::StrAppend(&out, i == 0 ? "" : i + 1 == tags.size() ? " or " : ", ", "'", std::string(tags[i]), "'");
  }
  return out;
}

}  // namespace

absl::StatusOr<StmtList> ParseTemplate(std::string_view source, std::string_view name) {
  TPSERVE_ASSIGN_OR_RETURN(std::vector<LexToken> tokens, Tokenize(source, name));
  return TemplateParser(std::move(tokens), name).ParseAll();
}

absl::StatusOr<StmtList> TemplateParser::ParseAll() { return ParseBody({}); }

absl::StatusOr<StmtList> TemplateParser::ParseBody(const EndTags& end_tags) {
  if (++nesting_ > kMaxNesting) return Error(Current(), "template nests too deeply");
  StmtList body;
  while (true) {
    const LexToken& token = Current();
    switch (token.type) {
      case Type::kData: {
        StmtPtr text = MakeStmt(StmtNode::Kind::kText, token);
        text->text = token.text;
        body.push_back(std::move(text));
        Advance();
        break;
      }
      case Type::kVariableBegin: {
        StmtPtr print = MakeStmt(StmtNode::Kind::kPrint, token);
        Advance();
        TPSERVE_ASSIGN_OR_RETURN(print->expr, ParseTuple(true, {}, false));
        if (Current().type != Type::kVariableEnd) {
          return Error(Current(), absl::StrCat("expected token 'end of print statement', got ",
                                               Describe(Current())));
        }
        Advance();
        body.push_back(std::move(print));
        break;
      }
      case Type::kBlockBegin: {
        const LexToken& tag = Peek();
        if (tag.type == Type::kName && Contains(end_tags, tag.text)) {
          --nesting_;
          return body;
        }
        Advance();
        TPSERVE_ASSIGN_OR_RETURN(StmtPtr stmt, ParseStatement());
        body.push_back(std::move(stmt));
        break;
      }
      case Type::kEnd:
        if (end_tags.empty()) {
          --nesting_;
          return body;
        }
        return Error(token, absl::StrCat("unexpected end of template, expected ",
                                         JoinTags(end_tags)));
      default:
        return Unexpected(token);
    }
  }
}

absl::StatusOr<StmtPtr> TemplateParser::ParseStatement() {
  const LexToken& tag = Current();
  if (tag.type != Type::kName) return Error(tag, "tag name expected");
  const std::string name = tag.text;
  if (name == "if") return ParseIf();
  if (name == "for") return ParseFor();
  if (name == "set") return ParseSet();
  if (name == "macro") return ParseMacro();
  if (name == "call") return ParseCallBlock();
  if (name == "filter") return ParseFilterBlock();
  if (name == "with") return ParseWith();
  if (name == "generation") return ParseScope("endgeneration");
  if (name == "print") {
    StmtPtr print = MakeStmt(StmtNode::Kind::kPrint, tag);
    Advance();
    TPSERVE_ASSIGN_OR_RETURN(print->expr, ParseTuple(true, {}, false));
    TPSERVE_RETURN_IF_ERROR(ExpectBlockEnd());
    return print;
  }
  if (name == "break" || name == "continue") {
    if (loop_depth_ == 0) return Error(tag, absl::StrCat("'", name, "' outside of a loop"));
    StmtPtr stmt = MakeStmt(name == "break" ? StmtNode::Kind::kBreak : StmtNode::Kind::kContinue, tag);
    Advance();
    TPSERVE_RETURN_IF_ERROR(ExpectBlockEnd());
    return stmt;
  }
  if (name.rfind("end", 0) == 0 || name == "elif" || name == "else") {
    return Error(tag, absl::StrCat("unexpected '", name, "'"));
  }
  return Error(tag, absl::StrCat("unknown tag '", name, "'"));
}

absl::Status TemplateParser::ExpectEndTag(std::string_view end_tag) {
  // ParseBody stopped at "{%" followed by one of its end tags.
  Advance();
  if (Current().text != end_tag) return Unexpected(Current());
  Advance();
  return ExpectBlockEnd();
}

absl::StatusOr<StmtPtr> TemplateParser::ParseIf() {
  StmtPtr stmt = MakeStmt(StmtNode::Kind::kIf, Current());
  Advance();
  while (true) {
    TPSERVE_ASSIGN_OR_RETURN(ExprPtr condition, ParseTuple(false, {}, false));
    TPSERVE_RETURN_IF_ERROR(ExpectBlockEnd());
    TPSERVE_ASSIGN_OR_RETURN(StmtList body, ParseBody({"elif", "else", "endif"}));
    stmt->branches.emplace_back(std::move(condition), std::move(body));
    Advance();  // {%
    const std::string tag = Current().text;
    Advance();
    if (tag == "elif") continue;
    if (tag == "else") {
      TPSERVE_RETURN_IF_ERROR(ExpectBlockEnd());
      TPSERVE_ASSIGN_OR_RETURN(StmtList else_body, ParseBody({"endif"}));
      stmt->branches.emplace_back(nullptr, std::move(else_body));
      Advance();
      Advance();
    }
    TPSERVE_RETURN_IF_ERROR(ExpectBlockEnd());
    return stmt;
  }
}

absl::StatusOr<StmtPtr> TemplateParser::ParseFor() {
  StmtPtr stmt = MakeStmt(StmtNode::Kind::kFor, Current());
  Advance();
  TPSERVE_ASSIGN_OR_RETURN(stmt->target, ParseAssignTarget(false));
  if (!SkipName("in")) {
    return Error(Current(), absl::StrCat("expected 'in', got ", Describe(Current())));
  }
  TPSERVE_ASSIGN_OR_RETURN(stmt->expr, ParseTuple(false, {"recursive"}, false));
  if (SkipName("if")) {
    TPSERVE_ASSIGN_OR_RETURN(stmt->condition, ParseExpression());
  }
  if (IsName("recursive")) return Error(Current(), "recursive loops are not supported");
  TPSERVE_RETURN_IF_ERROR(ExpectBlockEnd());
  ++loop_depth_;
  TPSERVE_ASSIGN_OR_RETURN(stmt->body, ParseBody({"endfor", "else"}));
  --loop_depth_;
  if (Peek().text == "else") {
    Advance();
    Advance();
    TPSERVE_RETURN_IF_ERROR(ExpectBlockEnd());
    TPSERVE_ASSIGN_OR_RETURN(stmt->else_body, ParseBody({"endfor"}));
  }
  TPSERVE_RETURN_IF_ERROR(ExpectEndTag("endfor"));
  return stmt;
}

absl::StatusOr<StmtPtr> TemplateParser::ParseSet() {
  StmtPtr stmt = MakeStmt(StmtNode::Kind::kSet, Current());
  Advance();
  TPSERVE_ASSIGN_OR_RETURN(stmt->target, ParseAssignTarget(true));
  if (SkipOperator("=")) {
    TPSERVE_ASSIGN_OR_RETURN(stmt->expr, ParseTuple(true, {}, false));
    TPSERVE_RETURN_IF_ERROR(ExpectBlockEnd());
    return stmt;
  }
  stmt->kind = StmtNode::Kind::kSetBlock;
  if (stmt->target.kind == AssignTarget::Kind::kTuple) {
    return Error(Current(), "a block set assigns to one name");
  }
  if (SkipOperator("|")) {
    TPSERVE_ASSIGN_OR_RETURN(stmt->expr, ParseFilterChain());
  }
  TPSERVE_RETURN_IF_ERROR(ExpectBlockEnd());
  TPSERVE_ASSIGN_OR_RETURN(stmt->body, ParseBody({"endset"}));
  TPSERVE_RETURN_IF_ERROR(ExpectEndTag("endset"));
  return stmt;
}

absl::StatusOr<AssignTarget> TemplateParser::ParseAssignTarget(bool with_namespace) {
  std::vector<AssignTarget> items;
  do {
    if (AtTupleEnd({"in"}) || IsOperator("=")) break;
    AssignTarget item;
    if (IsOperator("(")) {
      if (++nesting_ > kMaxNesting) return Error(Current(), "assignment target nests too deeply");
      Advance();
      TPSERVE_ASSIGN_OR_RETURN(item, ParseAssignTarget(false));
      TPSERVE_RETURN_IF_ERROR(ExpectOperator(")"));
      --nesting_;
    } else if (Current().type == Type::kName) {
      item.name = Current().text;
      Advance();
      if (with_namespace && IsOperator(".")) {
        Advance();
        item.kind = AssignTarget::Kind::kAttribute;
        TPSERVE_ASSIGN_OR_RETURN(item.attr, ExpectName());
      }
    } else {
      return Error(Current(), absl::StrCat("can't assign to ", Describe(Current())));
    }
    items.push_back(std::move(item));
  } while (SkipOperator(","));
  if (items.empty()) return Error(Current(), "expected an assignment target");
  if (items.size() == 1 && !IsOperator(",")) {
    // "a" stays a name; "a," was consumed above and makes a one-item tuple.
    if (tokens_[pos_ - 1].type != Type::kOperator || tokens_[pos_ - 1].text != ",") {
      return std::move(items[0]);
    }
  }
  AssignTarget tuple;
  tuple.kind = AssignTarget::Kind::kTuple;
  tuple.items = std::move(items);
  return tuple;
}

absl::Status TemplateParser::ParseMacroParams(std::vector<MacroParam>* params) {
  TPSERVE_RETURN_IF_ERROR(ExpectOperator("("));
  while (!IsOperator(")")) {
    if (!params->empty()) TPSERVE_RETURN_IF_ERROR(ExpectOperator(","));
    if (IsOperator(")")) break;
    MacroParam param;
    TPSERVE_ASSIGN_OR_RETURN(param.name, ExpectName());
    if (SkipOperator("=")) {
      TPSERVE_ASSIGN_OR_RETURN(param.default_value, ParseExpression());
    } else if (!params->empty() && params->back().default_value != nullptr) {
      return Error(Current(), "non-default argument follows default argument");
    }
    params->push_back(std::move(param));
  }
  return ExpectOperator(")");
}

absl::StatusOr<StmtPtr> TemplateParser::ParseMacro() {
  StmtPtr stmt = MakeStmt(StmtNode::Kind::kMacro, Current());
  Advance();
  TPSERVE_ASSIGN_OR_RETURN(stmt->name, ExpectName());
  TPSERVE_RETURN_IF_ERROR(ParseMacroParams(&stmt->params));
  TPSERVE_RETURN_IF_ERROR(ExpectBlockEnd());
  const int outer_loops = loop_depth_;
  loop_depth_ = 0;
  TPSERVE_ASSIGN_OR_RETURN(stmt->body, ParseBody({"endmacro"}));
  loop_depth_ = outer_loops;
  TPSERVE_RETURN_IF_ERROR(ExpectEndTag("endmacro"));
  return stmt;
}

absl::StatusOr<StmtPtr> TemplateParser::ParseCallBlock() {
  StmtPtr stmt = MakeStmt(StmtNode::Kind::kCallBlock, Current());
  Advance();
  if (IsOperator("(")) TPSERVE_RETURN_IF_ERROR(ParseMacroParams(&stmt->params));
  const LexToken& at = Current();
  TPSERVE_ASSIGN_OR_RETURN(stmt->expr, ParseExpression());
  if (stmt->expr->kind != ExprNode::Kind::kCall) return Error(at, "expected call");
  TPSERVE_RETURN_IF_ERROR(ExpectBlockEnd());
  const int outer_loops = loop_depth_;
  loop_depth_ = 0;
  TPSERVE_ASSIGN_OR_RETURN(stmt->body, ParseBody({"endcall"}));
  loop_depth_ = outer_loops;
  TPSERVE_RETURN_IF_ERROR(ExpectEndTag("endcall"));
  return stmt;
}

absl::StatusOr<StmtPtr> TemplateParser::ParseFilterBlock() {
  StmtPtr stmt = MakeStmt(StmtNode::Kind::kFilterBlock, Current());
  Advance();
  TPSERVE_ASSIGN_OR_RETURN(stmt->expr, ParseFilterChain());
  TPSERVE_RETURN_IF_ERROR(ExpectBlockEnd());
  TPSERVE_ASSIGN_OR_RETURN(stmt->body, ParseBody({"endfilter"}));
  TPSERVE_RETURN_IF_ERROR(ExpectEndTag("endfilter"));
  return stmt;
}

absl::StatusOr<StmtPtr> TemplateParser::ParseWith() {
  StmtPtr stmt = MakeStmt(StmtNode::Kind::kScope, Current());
  Advance();
  while (Current().type != Type::kBlockEnd) {
    if (!stmt->body.empty()) TPSERVE_RETURN_IF_ERROR(ExpectOperator(","));
    StmtPtr set = MakeStmt(StmtNode::Kind::kSet, Current());
    TPSERVE_ASSIGN_OR_RETURN(set->target.name, ExpectName());
    TPSERVE_RETURN_IF_ERROR(ExpectOperator("="));
    TPSERVE_ASSIGN_OR_RETURN(set->expr, ParseExpression());
    stmt->body.push_back(std::move(set));
  }
  TPSERVE_RETURN_IF_ERROR(ExpectBlockEnd());
  TPSERVE_ASSIGN_OR_RETURN(StmtList body, ParseBody({"endwith"}));
  for (StmtPtr& s : body) stmt->body.push_back(std::move(s));
  TPSERVE_RETURN_IF_ERROR(ExpectEndTag("endwith"));
  return stmt;
}

absl::StatusOr<StmtPtr> TemplateParser::ParseScope(std::string_view end_tag) {
  StmtPtr stmt = MakeStmt(StmtNode::Kind::kScope, Current());
  Advance();
  TPSERVE_RETURN_IF_ERROR(ExpectBlockEnd());
  TPSERVE_ASSIGN_OR_RETURN(stmt->body, ParseBody({end_tag}));
  TPSERVE_RETURN_IF_ERROR(ExpectEndTag(end_tag));
  return stmt;
}

absl::StatusOr<ExprPtr> TemplateParser::ParseFilterChain() {
  ExprPtr chain;
  do {
    TPSERVE_ASSIGN_OR_RETURN(chain, ParseFilter(std::move(chain)));
  } while (SkipOperator("|"));
  return chain;
}

// Tokens.

const LexToken& TemplateParser::Peek(size_t ahead) const {
  return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
}

bool TemplateParser::IsOperator(std::string_view op) const {
  return Current().type == Type::kOperator && Current().text == op;
}

bool TemplateParser::IsName(std::string_view name) const {
  return Current().type == Type::kName && Current().text == name;
}

bool TemplateParser::SkipOperator(std::string_view op) {
  if (!IsOperator(op)) return false;
  Advance();
  return true;
}

bool TemplateParser::SkipName(std::string_view name) {
  if (!IsName(name)) return false;
  Advance();
  return true;
}

absl::Status TemplateParser::ExpectOperator(std::string_view op) {
  if (SkipOperator(op)) return absl::OkStatus();
  return Error(Current(), absl::StrCat("expected token '", std::string(op), "', got ", Describe(Current())));
}

absl::Status TemplateParser::ExpectBlockEnd() {
  if (Current().type == Type::kBlockEnd) {
    Advance();
    return absl::OkStatus();
  }
  return Error(Current(), absl::StrCat("expected token 'end of statement block', got ",
                                       Describe(Current())));
}

absl::StatusOr<std::string> TemplateParser::ExpectName() {
  if (Current().type != Type::kName) {
    return Error(Current(), absl::StrCat("expected token 'name', got ", Describe(Current())));
  }
  std::string name = Current().text;
  Advance();
  return name;
}

bool TemplateParser::AtTupleEnd(const EndTags& extra_end) const {
  const LexToken& token = Current();
  if (token.type == Type::kVariableEnd || token.type == Type::kBlockEnd ||
      token.type == Type::kEnd) {
    return true;
  }
  if (token.type == Type::kOperator && token.text == ")") return true;
  return token.type == Type::kName && Contains(extra_end, token.text);
}

std::string TemplateParser::Describe(const LexToken& token) const {
  switch (token.type) {
    case Type::kEnd: return "end of template";
    case Type::kBlockEnd: return "'end of statement block'";
    case Type::kVariableEnd: return "'end of print statement'";
    case Type::kBlockBegin: return "'begin of statement block'";
    case Type::kVariableBegin: return "'begin of print statement'";
    case Type::kData: return "template data";
    case Type::kString: return "string";
    case Type::kInteger: return "integer";
    case Type::kFloat: return "float";
    default: return absl::StrCat("'", token.text, "'");
  }
}

absl::Status TemplateParser::Error(const LexToken& at, std::string_view message) const {
  return absl::InvalidArgumentError(
      absl::StrCat(name_, ":", at.line, ":", at.column, ": ", std::string(message)));
}

absl::Status TemplateParser::Unexpected(const LexToken& at) const {
  return Error(at, absl::StrCat("unexpected ", Describe(at)));
}

}  // namespace tpserve::jinja
