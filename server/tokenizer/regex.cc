#include "server/tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "base/utf8.h"
#include "server/tokenizer/string_map.h"

namespace tpserve {
namespace {

// Oniguruma's \s is Unicode White_Space, which includes U+0085 (NEL); PCRE2's is
// not. Rewrites \s and \S outside and \s inside character classes to add it.
std::string ToPcre2Syntax(std::string_view pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char next = pattern[++i];
      if (next == 's') {
        out += in_class ? "\\s\\x{85}" : "[\\s\\x{85}]";
      } else if (next == 'S' && !in_class) {
        out += "[^\\s\\x{85}]";
      } else {
        out += c;
        out += next;
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

// Per-thread match state: a JIT stack large enough for very long words.
struct ThreadMatchState {
  ThreadMatchState()
      : jit_stack(pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr)),
        context(pcre2_match_context_create(nullptr)) {
    pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~ThreadMatchState() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(jit_stack);
  }
  pcre2_jit_stack* jit_stack;
  pcre2_match_context* context;
};

pcre2_match_context* ThreadContext() {
  thread_local ThreadMatchState state;
  return state.context;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Regex>> Regex::Compile(std::string_view pattern, bool literal) {
  const std::string source = literal ? std::string(pattern) : ToPcre2Syntax(pattern);
  // PCRE2_LITERAL admits no UCP (it has no classes to apply it to).
  const uint32_t options =
      PCRE2_UTF | PCRE2_NO_UTF_CHECK | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(source.data()), source.size(),
                                   options, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return absl::InvalidArgumentError(absl::StrCat("regex '", AbslView(pattern), "' does not compile at ",
                                                   offset, ": ",
                                                   reinterpret_cast<char*>(message)));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if absent
  return std::unique_ptr<Regex>(new Regex(code));
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

absl::Status Regex::FindAll(std::string_view text,
                            std::vector<std::pair<size_t, size_t>>* matches) const {
  auto* code = static_cast<pcre2_code*>(code_);
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(code, nullptr);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  absl::Status status;
  while (start <= text.size()) {
    int rc = pcre2_match(code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, data,
                         ThreadContext());
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {  // the interpreter keeps its frames on the heap
      rc = pcre2_match(code, subject, text.size(), start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                       data, nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      status = absl::ResourceExhaustedError(absl::StrCat("regex match failed with code ", rc));
      break;
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
    const size_t begin = ovector[0], end = ovector[1];
    if (end > begin) {
      matches->emplace_back(begin, end);
      start = end;
    } else {
      if (begin >= text.size()) break;
      start = begin + Utf8LeadLength(static_cast<unsigned char>(text[begin]));
    }
  }
  pcre2_match_data_free(data);
  return status;
}

}  // namespace tpserve
