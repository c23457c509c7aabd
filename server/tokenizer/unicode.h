// Unicode properties and normalization forms (backed by ICU), with the meanings
// Rust's char methods have, because Hugging Face tokenizers is written in Rust:
// IsWhitespace = White_Space, IsAlphanumeric = Alphabetic or numeric (Nd/Nl/No).
// Thread-safe.
#ifndef TPSERVE_SERVER_TOKENIZER_UNICODE_H_
#define TPSERVE_SERVER_TOKENIZER_UNICODE_H_

#include <string>
#include <string_view>

namespace tpserve {

enum class NormalizationForm { kNfc, kNfd, kNfkc, kNfkd };

bool IsWhitespace(char32_t cp);
bool IsNumeric(char32_t cp);
bool IsAlphanumeric(char32_t cp);
// Rust regex's Unicode \w: Alphabetic, marks, Nd, Pc, Join_Control.
bool IsWordChar(char32_t cp);

// `text` must be valid UTF-8.
std::string NormalizeUnicode(NormalizationForm form, std::string_view text);
std::string ToLowercase(std::string_view text);

}  // namespace tpserve

#endif  // TPSERVE_SERVER_TOKENIZER_UNICODE_H_
