#include "server/tokenizer/incremental_detokenizer.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/utf8.h"

namespace tpserve {
namespace {

bool EndsWithReplacement(const std::string& text) {
  const std::string_view tail(kReplacementChar);
  return text.size() >= tail.size() && text.compare(text.size() - tail.size(), tail.size(),
                                                    tail.data(), tail.size()) == 0;
}

}  // namespace

absl::StatusOr<std::string> IncrementalDetokenizer::DecodeRange(size_t begin, size_t end) const {
  return tokenizer_.Decode(absl::MakeConstSpan(ids_).subspan(begin, end - begin),
                           skip_special_tokens_);
}

absl::StatusOr<std::string> IncrementalDetokenizer::Step(int32_t id) {
  if (id < 0) return absl::InvalidArgumentError(absl::StrCat("token id ", id, " is negative"));
  ids_.push_back(id);
  if (skip_special_tokens_ && tokenizer_.IsSpecialToken(id)) return std::string();
  if (tokenizer_.IsByteFallbackToken(id)) return std::string();
  TPSERVE_ASSIGN_OR_RETURN(std::string prev, DecodeRange(0, read_));
  TPSERVE_ASSIGN_OR_RETURN(std::string text, DecodeRange(0, ids_.size()));
  if (text.size() <= prev.size() || text.compare(0, prev.size(), prev) != 0 ||
      EndsWithReplacement(text)) {
    return std::string();  // nothing final yet
  }
  // The emitted ids become the context of the next window.
  ids_.erase(ids_.begin(), ids_.begin() + read_);
  read_ = ids_.size();
  return text.substr(prev.size());
}

absl::StatusOr<std::string> IncrementalDetokenizer::Flush() {
  TPSERVE_ASSIGN_OR_RETURN(std::string prev, DecodeRange(0, read_));
  TPSERVE_ASSIGN_OR_RETURN(std::string text, DecodeRange(0, ids_.size()));
  if (text.compare(0, prev.size(), prev) != 0) {
    return absl::InternalError("held text does not extend the emitted text");
  }
  ids_.erase(ids_.begin(), ids_.begin() + read_);
  read_ = ids_.size();
  return text.substr(prev.size());
}

}  // namespace tpserve
