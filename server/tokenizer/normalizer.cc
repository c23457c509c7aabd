#include "server/tokenizer/normalizer.h"

#include <utility>

#include "base/status_macros.h"
#include "base/utf8.h"

namespace tpserve {

absl::StatusOr<std::string> UnicodeNormalizer::Normalize(std::string_view text) const {
  return NormalizeUnicode(form_, text);
}

absl::StatusOr<std::string> LowercaseNormalizer::Normalize(std::string_view text) const {
  return ToLowercase(text);
}

absl::StatusOr<std::string> PrependNormalizer::Normalize(std::string_view text) const {
  if (text.empty()) return std::string();
  std::string out;
  out.reserve(prefix_.size() + text.size());
  out.append(prefix_).append(text);
  return out;
}

absl::StatusOr<std::string> ReplaceNormalizer::Normalize(std::string_view text) const {
  std::string out;
  out.reserve(text.size());
  if (regex_ == nullptr) {
    if (literal_.empty()) return std::string(text);
    size_t pos = 0;
    for (size_t hit; (hit = text.find(literal_, pos)) != std::string_view::npos;
         pos = hit + literal_.size()) {
      out.append(text.substr(pos, hit - pos)).append(content_);
    }
    out.append(text.substr(pos));
    return out;
  }
  std::vector<std::pair<size_t, size_t>> matches;
  TPSERVE_RETURN_IF_ERROR(regex_->FindAll(text, &matches));
  size_t pos = 0;
  for (const auto& [begin, end] : matches) {
    out.append(text.substr(pos, begin - pos)).append(content_);
    pos = end;
  }
  out.append(text.substr(pos));
  return out;
}

absl::StatusOr<std::string> StripNormalizer::Normalize(std::string_view text) const {
  size_t begin = 0, end = text.size();
  if (left_) {
    while (begin < end) {
      size_t next = begin;
      if (!IsWhitespace(NextCodePoint(text, &next))) break;
      begin = next;
    }
  }
  if (right_) {
    while (end > begin) {
      size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
      size_t probe = start;
      if (!IsWhitespace(NextCodePoint(text, &probe))) break;
      end = start;
    }
  }
  return std::string(text.substr(begin, end - begin));
}

absl::StatusOr<std::string> SequenceNormalizer::Normalize(std::string_view text) const {
  std::string current(text);
  for (const auto& step : steps_) {
    TPSERVE_ASSIGN_OR_RETURN(current, step->Normalize(current));
  }
  return current;
}

}  // namespace tpserve
