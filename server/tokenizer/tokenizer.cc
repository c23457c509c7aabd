#include "server/tokenizer/tokenizer.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "base/utf8.h"

namespace tpserve {

Tokenizer::Tokenizer(TokenizerParts parts) : parts_(std::move(parts)) {
  id_bound_ = parts_.model->size();
  for (const AddedToken& token : parts_.added->tokens()) {
    id_bound_ = std::max(id_bound_, token.id + 1);
  }
  if (parts_.post_processor != nullptr) {
    id_bound_ = std::max(id_bound_, parts_.post_processor->MaxId() + 1);
  }
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(std::string_view text,
                                                       bool add_special_tokens) const {
  TPSERVE_RETURN_IF_ERROR(ValidateUtf8(text));
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  std::vector<AddedSplit> raw_splits;
  parts_.added->Split(text, /*normalized_tokens=*/false, &raw_splits);
  std::vector<AddedSplit> splits;
  for (const AddedSplit& raw : raw_splits) {
    if (raw.id >= 0) {
      ids.push_back(raw.id);
      continue;
    }
    const std::string_view segment = text.substr(raw.begin, raw.end - raw.begin);
    std::string normalized;
    if (parts_.normalizer != nullptr) {
      TPSERVE_ASSIGN_OR_RETURN(normalized, parts_.normalizer->Normalize(segment));
    } else {
      normalized.assign(segment);
    }
    splits.clear();
    parts_.added->Split(normalized, /*normalized_tokens=*/true, &splits);
    for (const AddedSplit& split : splits) {
      if (split.id >= 0) {
        ids.push_back(split.id);
        continue;
      }
      TPSERVE_RETURN_IF_ERROR(
          EncodeSegment(std::string_view(normalized).substr(split.begin, split.end - split.begin),
                        raw.begin == 0 && split.begin == 0, &ids));
    }
  }
  if (add_special_tokens && parts_.post_processor != nullptr) {
    return parts_.post_processor->Process(std::move(ids));
  }
  return ids;
}

absl::Status Tokenizer::EncodeSegment(std::string_view segment, bool at_origin,
                                      std::vector<int32_t>* ids) const {
  if (segment.empty()) return absl::OkStatus();
  thread_local PieceList pieces;
  pieces.text.assign(segment);
  pieces.spans.assign(1, PieceSpan{0, segment.size(), at_origin});
  if (parts_.pre_tokenizer != nullptr) {
    TPSERVE_RETURN_IF_ERROR(parts_.pre_tokenizer->PreTokenize(&pieces));
  }
  const std::string_view text = pieces.text;
  for (const PieceSpan& span : pieces.spans) {
    TPSERVE_RETURN_IF_ERROR(parts_.model->Tokenize(text.substr(span.begin, span.end - span.begin), ids));
  }
  return absl::OkStatus();
}

const std::string* Tokenizer::IdToToken(int32_t id) const {
  if (const std::string* added = parts_.added->DecodeForm(id)) return added;
  return parts_.model->IdToToken(id);
}

absl::StatusOr<std::string> Tokenizer::Decode(absl::Span<const int32_t> ids,
                                              bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int32_t id : ids) {
    if (id < 0) return absl::InvalidArgumentError(absl::StrCat("token id ", id, " is negative"));
    // An id the tokenizer has no token for (a model's padded vocabulary rows, a hole in
    // the ids) decodes to nothing, as in Hugging Face tokenizers.
    const std::string* token = id < id_bound_ ? IdToToken(id) : nullptr;
    if (token == nullptr) continue;
    if (skip_special_tokens && parts_.added->IsSpecial(*token)) continue;
    tokens.push_back(*token);
  }
  if (parts_.decoder == nullptr) return absl::StrJoin(tokens, " ");
  TPSERVE_RETURN_IF_ERROR(parts_.decoder->DecodeChain(&tokens));
  return absl::StrJoin(tokens, "");
}

std::optional<int32_t> Tokenizer::TokenToId(std::string_view token) const {
  for (const AddedToken& added : parts_.added->tokens()) {
    if (added.content == token) return added.id;
  }
  return parts_.model->TokenToId(token);
}

bool Tokenizer::IsSpecialToken(int32_t id) const {
  const std::string* token = IdToToken(id);
  return token != nullptr && parts_.added->IsSpecial(*token);
}

bool Tokenizer::IsByteFallbackToken(int32_t id) const {
  if (parts_.decoder == nullptr || !parts_.decoder->JoinsByteRuns()) return false;
  const std::string* token = IdToToken(id);
  return token != nullptr && ParseByteToken(*token) >= 0;
}

}  // namespace tpserve
