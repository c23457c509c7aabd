// Builds the statement tree of a template from its tokens, with jinja2's
// grammar and operator precedence. Nesting is bounded (statements, brackets,
// expression trees) so that no source, however hostile, exhausts the stack
// here or when the tree is walked.
#ifndef TPSERVE_JINJA_PARSER_H_
#define TPSERVE_JINJA_PARSER_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "jinja/ast.h"
#include "jinja/lexer.h"

namespace tpserve::jinja {

inline constexpr int kMaxExprDepth = 200;
inline constexpr int kMaxNesting = 100;

// `source` as NormalizeSource returns it. Errors are INVALID_ARGUMENT
// "name:line:column: message".
absl::StatusOr<StmtList> ParseTemplate(std::string_view source, std::string_view name);

// The parser's state over one token list; ParseTemplate is its entry point.
class TemplateParser {
 public:
  TemplateParser(std::vector<LexToken> tokens, std::string_view name)
      : tokens_(std::move(tokens)), name_(name) {}

  absl::StatusOr<StmtList> ParseAll();

 private:
  using EndTags = std::vector<std::string_view>;

  // Statements (parser.cc).
  absl::StatusOr<StmtList> ParseBody(const EndTags& end_tags);
  absl::StatusOr<StmtPtr> ParseStatement();
  absl::StatusOr<StmtPtr> ParseIf();
  absl::StatusOr<StmtPtr> ParseFor();
  absl::StatusOr<StmtPtr> ParseSet();
  absl::StatusOr<StmtPtr> ParseMacro();
  absl::StatusOr<StmtPtr> ParseCallBlock();
  absl::StatusOr<StmtPtr> ParseFilterBlock();
  absl::StatusOr<StmtPtr> ParseWith();
  absl::StatusOr<StmtPtr> ParseScope(std::string_view end_tag);
  absl::Status ParseMacroParams(std::vector<MacroParam>* params);
  absl::StatusOr<AssignTarget> ParseAssignTarget(bool with_namespace);
  // "name(args) | name ..." (the first "|" already skipped), or null if none.
  absl::StatusOr<ExprPtr> ParseFilterChain();
  // Consumes "{% end_tag %}" after a body that stopped at it.
  absl::Status ExpectEndTag(std::string_view end_tag);

  // Expressions (parser_expr.cc).
  absl::StatusOr<ExprPtr> ParseTuple(bool with_condition, const EndTags& extra_end,
                                     bool explicit_parens);
  absl::StatusOr<ExprPtr> ParseExpression();
  absl::StatusOr<ExprPtr> ParseCondition();
  absl::StatusOr<ExprPtr> ParseOr();
  absl::StatusOr<ExprPtr> ParseAnd();
  absl::StatusOr<ExprPtr> ParseNot();
  absl::StatusOr<ExprPtr> ParseCompare();
  absl::StatusOr<ExprPtr> ParseMath1();
  absl::StatusOr<ExprPtr> ParseConcat();
  absl::StatusOr<ExprPtr> ParseMath2();
  absl::StatusOr<ExprPtr> ParsePow();
  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter);
  absl::StatusOr<ExprPtr> ParsePrimary();
  absl::StatusOr<ExprPtr> ParseList();
  absl::StatusOr<ExprPtr> ParseDict();
  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node);
  absl::StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node);
  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr node);
  absl::StatusOr<ExprPtr> ParseSubscribed();
  absl::StatusOr<ExprPtr> ParseFilter(ExprPtr node);
  absl::StatusOr<ExprPtr> ParseTest(ExprPtr node);
  absl::Status ParseCallArgs(ExprNode* call);
  absl::StatusOr<std::string> ParseDottedName();
  // A node of `kind` at `at`; its depth is checked when children are added.
  ExprPtr MakeNode(ExprNode::Kind kind, const LexToken& at) const;
  absl::StatusOr<ExprPtr> Finish(ExprPtr node) const;

  // Tokens.
  const LexToken& Current() const { return tokens_[pos_]; }
  const LexToken& Peek(size_t ahead = 1) const;
  void Advance() {
    if (pos_ + 1 < tokens_.size()) ++pos_;
  }
  bool IsOperator(std::string_view op) const;
  bool IsName(std::string_view name) const;
  bool SkipOperator(std::string_view op);
  bool SkipName(std::string_view name);
  absl::Status ExpectOperator(std::string_view op);
  absl::Status ExpectBlockEnd();
  absl::StatusOr<std::string> ExpectName();
  bool AtTupleEnd(const EndTags& extra_end) const;
  absl::Status Error(const LexToken& at, std::string_view message) const;
  absl::Status Unexpected(const LexToken& at) const;
  std::string Describe(const LexToken& token) const;

  std::vector<LexToken> tokens_;
  std::string name_;
  size_t pos_ = 0;
  int nesting_ = 0;     // statement bodies and bracketed expressions open now
  int loop_depth_ = 0;  // for bodies open now, inside the innermost macro
};

}  // namespace tpserve::jinja

#endif  // TPSERVE_JINJA_PARSER_H_
