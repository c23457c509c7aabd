#include "server/http/http_message.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"

namespace tpserve {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::optional<std::string> HttpRequest::header(absl::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (absl::EqualsIgnoreCase(key, name)) return value;
  }
  return std::nullopt;
}

bool IsHttpToken(absl::string_view s) {
  if (s.empty()) return false;
  for (const char c : s) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) &&
        absl::string_view("!#$%&'*+-.^_`|~").find(c) == absl::string_view::npos) {
      return false;
    }
  }
  return true;
}

bool PercentDecode(absl::string_view in, std::string* out) {
  out->clear();
  out->reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      *out += in[i];
      continue;
    }
    if (i + 2 >= in.size()) return false;
    const int hi = HexValue(in[i + 1]);
    const int lo = HexValue(in[i + 2]);
    if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) return false;
    *out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return true;
}

}  // namespace tpserve
