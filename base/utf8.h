// UTF-8 helpers for the tokenizer, request validation and the gRPC edge: validation,
// code point iteration, and lossy conversion with the same replacement rule as Rust's String::from_utf8_lossy
// (one U+FFFD per maximal invalid subpart), which Hugging Face decoders use.
// Pure functions; safe from any thread.
#ifndef TPSERVE_BASE_UTF8_H_
#define TPSERVE_BASE_UTF8_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace tpserve {

inline constexpr char kReplacementChar[] = "\xEF\xBF\xBD";  // U+FFFD

// Length in bytes of the valid UTF-8 sequence starting at text[pos], or 0 when the
// bytes there are not a complete, valid sequence.
size_t ValidUtf8SequenceLength(std::string_view text, size_t pos);

// OK for valid UTF-8; InvalidArgument naming the first bad byte offset otherwise.
absl::Status ValidateUtf8(std::string_view text);

// Decodes the code point at text[*pos] and advances *pos. Requires valid UTF-8.
char32_t NextCodePoint(std::string_view text, size_t* pos);

// Length of the UTF-8 sequence led by `lead` (1 for continuation/invalid bytes).
inline size_t Utf8LeadLength(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  if ((lead >> 3) == 0x1E) return 4;
  return 1;
}

void AppendUtf8(char32_t cp, std::string* out);

// Bytes to text, replacing each maximal invalid subpart with U+FFFD.
std::string LossyUtf8(std::string_view bytes);

}  // namespace tpserve

#endif  // TPSERVE_BASE_UTF8_H_
