#include "server/tokenizer/decoder.h"

#include <utility>

#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "base/utf8.h"
#include "server/tokenizer/byte_level.h"

namespace tpserve {
namespace {

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void FlushBytes(std::string* bytes, std::vector<std::string>* out) {
  if (bytes->empty()) return;
  if (ValidateUtf8(*bytes).ok()) {
    out->push_back(*bytes);
  } else {
    for (size_t i = 0; i < bytes->size(); ++i) out->push_back(kReplacementChar);
  }
  bytes->clear();
}

}  // namespace

int ParseByteToken(std::string_view token) {
  if (token.size() != 6 || token.substr(0, 3) != "<0x" || token[5] != '>') return -1;
  const int hi = HexDigit(token[3]), lo = HexDigit(token[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

absl::Status ByteLevelDecoder::DecodeChain(std::vector<std::string>* tokens) const {
  std::string bytes;
  for (const std::string& token : *tokens) {
    if (!AppendByteLevelBytes(token, &bytes)) bytes += token;
  }
  tokens->assign(1, LossyUtf8(bytes));
  return absl::OkStatus();
}

absl::Status MetaspaceDecoder::DecodeChain(std::vector<std::string>* tokens) const {
  for (size_t i = 0; i < tokens->size(); ++i) {
    const std::string& token = (*tokens)[i];
    const bool drop = i == 0 && strip_first_;
    std::string out;
    out.reserve(token.size());
    for (size_t pos = 0; pos < token.size();) {
      if (token.compare(pos, replacement_.size(), replacement_) == 0) {
        if (!drop) out.push_back(' ');
        pos += replacement_.size();
      } else {
        out.push_back(token[pos++]);
      }
    }
    (*tokens)[i] = std::move(out);
  }
  return absl::OkStatus();
}

absl::Status ReplaceDecoder::DecodeChain(std::vector<std::string>* tokens) const {
  for (std::string& token : *tokens) {
    TPSERVE_ASSIGN_OR_RETURN(token, replace_->Normalize(token));
  }
  return absl::OkStatus();
}

absl::Status ByteFallbackDecoder::DecodeChain(std::vector<std::string>* tokens) const {
  std::vector<std::string> out;
  out.reserve(tokens->size());
  std::string bytes;
  for (std::string& token : *tokens) {
    const int byte = ParseByteToken(token);
    if (byte >= 0) {
      bytes.push_back(static_cast<char>(byte));
      continue;
    }
    FlushBytes(&bytes, &out);
    out.push_back(std::move(token));
  }
  FlushBytes(&bytes, &out);
  *tokens = std::move(out);
  return absl::OkStatus();
}

absl::Status FuseDecoder::DecodeChain(std::vector<std::string>* tokens) const {
  tokens->assign(1, absl::StrJoin(*tokens, ""));
  return absl::OkStatus();
}

absl::Status StripDecoder::DecodeChain(std::vector<std::string>* tokens) const {
  for (std::string& token : *tokens) {
    std::vector<std::pair<size_t, char32_t>> chars;  // (byte offset, code point)
    for (size_t pos = 0; pos < token.size();) {
      const size_t at = pos;
      chars.emplace_back(at, NextCodePoint(token, &pos));
    }
    size_t first = 0;
    while (first < start_ && first < chars.size() && chars[first].second == content_) ++first;
    size_t last = chars.size();
    for (size_t i = 0; i < stop_ && last > first && chars[last - 1].second == content_; ++i) {
      --last;
    }
    const size_t begin = first < chars.size() ? chars[first].first : token.size();
    const size_t end = last < chars.size() ? chars[last].first : token.size();
    token = token.substr(begin, end > begin ? end - begin : 0);
  }
  return absl::OkStatus();
}

absl::Status SequenceDecoder::DecodeChain(std::vector<std::string>* tokens) const {
  for (const auto& step : steps_) {
    TPSERVE_RETURN_IF_ERROR(step->DecodeChain(tokens));
  }
  return absl::OkStatus();
}

bool SequenceDecoder::JoinsByteRuns() const {
  for (const auto& step : steps_) {
    if (step->JoinsByteRuns()) return true;
  }
  return false;
}

}  // namespace tpserve
