// Regex: a compiled PCRE2 pattern (UTF + Unicode properties, JIT when available)
// for Hugging Face's Split/ByteLevel/Replace patterns, which are written for
// Oniguruma. Immutable after Compile; FindAll is safe from many threads at once
// (each thread uses its own JIT stack).
#ifndef TPSERVE_SERVER_TOKENIZER_REGEX_H_
#define TPSERVE_SERVER_TOKENIZER_REGEX_H_

#include <cstddef>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace tpserve {

class Regex {
 public:
  // `literal` compiles `pattern` as a plain string (HF's {"String": ...} patterns).
  static absl::StatusOr<std::unique_ptr<Regex>> Compile(std::string_view pattern,
                                                        bool literal = false);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends every non-empty, non-overlapping match [begin, end) of `text` (valid
  // UTF-8), left to right, to *matches.
  absl::Status FindAll(std::string_view text,
                       std::vector<std::pair<size_t, size_t>>* matches) const;

 private:
  explicit Regex(void* code) : code_(code) {}
  void* code_;  // pcre2_code*
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_TOKENIZER_REGEX_H_
