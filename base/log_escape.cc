#include "base/log_escape.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tpserve {

std::string LogEscape(absl::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const std::string piece =
        (c >= 0x20 && c <= 0x7e && c != '\\') ? std::string(1, static_cast<char>(c))
                                                : absl::StrFormat("\\x%02x", c);
    if (out.size() + piece.size() > kMaxLoggedBytes) {
      absl::StrAppend(&out, "...[", text.size(), " bytes]");
      return out;
    }
    out += piece;
  }
  return out;
}

}  // namespace tpserve
