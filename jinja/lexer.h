// Splits template source into tokens as jinja2's lexer does with the
// environment transformers uses: trim_blocks, lstrip_blocks, no trailing
// newline kept, "\r\n" and "\r" read as "\n". Whitespace control ("-" and "+"
// on tags), comments and {% raw %} are resolved here, so the parser sees
// only text, tag delimiters and expression tokens.
#ifndef TPSERVE_JINJA_LEXER_H_
#define TPSERVE_JINJA_LEXER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tpserve::jinja {

struct LexToken {
  enum class Type {
    kData,           // template text, already stripped
    kVariableBegin,  // {{
    kVariableEnd,    // }}
    kBlockBegin,     // {%
    kBlockEnd,       // %}
    kName,
    kString,         // text: the unescaped value
    kInteger,        // int_value
    kFloat,          // float_value
    kOperator,       // text: "+", "//", "(", ...
    kEnd,            // end of the source
  };
  Type type = Type::kEnd;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;
  int column = 1;
};

// Errors (an unterminated comment, string or raw block, an unexpected
// character or bracket) are INVALID_ARGUMENT "name:line:column: message".
absl::StatusOr<std::vector<LexToken>> Tokenize(std::string_view source, std::string_view name);

// Python's newline handling of template source: line breaks become "\n" and one
// trailing newline is dropped.
std::string NormalizeSource(std::string_view source);

}  // namespace tpserve::jinja

#endif  // TPSERVE_JINJA_LEXER_H_
