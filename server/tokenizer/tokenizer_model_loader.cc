#include "server/tokenizer/tokenizer_model_loader.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/utf8.h"

namespace tpserve {
namespace {

absl::StatusOr<std::vector<std::pair<std::string, int32_t>>> LoadVocab(const JsonField& field) {
  TPSERVE_RETURN_IF_ERROR(field.ExpectObject());
  std::vector<std::pair<std::string, int32_t>> vocab;
  vocab.reserve(field.value().size());
  for (const auto& [token, id] : field.value().items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
      return field[token].Error("expected a non-negative integer id");
    }
    vocab.emplace_back(token, static_cast<int32_t>(id.get<int64_t>()));
  }
  return vocab;
}

// "left right" strings (older files) or ["left", "right"] pairs.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> LoadMerges(
    const JsonField& field) {
  TPSERVE_RETURN_IF_ERROR(field.ExpectArray());
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(field.value().size());
  for (size_t i = 0; i < field.value().size(); ++i) {
    const JsonField merge = field.At(i);
    if (merge.value().is_string()) {
      const std::string& line = merge.value().get_ref<const std::string&>();
      const size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
        return merge.Error("expected \"left right\" with exactly one space");
      }
      merges.emplace_back(line.substr(0, space), line.substr(space + 1));
      continue;
    }
    if (!merge.value().is_array() || merge.value().size() != 2) {
      return merge.Error("expected \"left right\" or [\"left\", \"right\"]");
    }
    TPSERVE_ASSIGN_OR_RETURN(std::string left, merge.At(0).String());
    TPSERVE_ASSIGN_OR_RETURN(std::string right, merge.At(1).String());
    merges.emplace_back(std::move(left), std::move(right));
  }
  return merges;
}

absl::Status ExpectEmptyAffix(const JsonField& field) {
  if (field.is_null()) return absl::OkStatus();
  TPSERVE_ASSIGN_OR_RETURN(std::string affix, field.String());
  return affix.empty() ? absl::OkStatus() : field.Error("subword affixes are not supported");
}

}  // namespace

absl::StatusOr<std::unique_ptr<BpeModel>> LoadBpeModel(const JsonField& field, bool byte_level) {
  TPSERVE_RETURN_IF_ERROR(field.ExpectObject());
  if (!field["type"].is_null()) {
    TPSERVE_ASSIGN_OR_RETURN(std::string type, field["type"].String());
    if (type != "BPE") return field["type"].Error(absl::StrCat("'", type, "' is not supported"));
  }
  if (!field["dropout"].is_null()) {
    const nlohmann::json& dropout = field["dropout"].value();
    if (!dropout.is_number() || dropout.get<double>() != 0.0) {
      return field["dropout"].Error("BPE dropout is not supported (encode would be random)");
    }
  }
  TPSERVE_RETURN_IF_ERROR(ExpectEmptyAffix(field["continuing_subword_prefix"]));
  TPSERVE_RETURN_IF_ERROR(ExpectEmptyAffix(field["end_of_word_suffix"]));
  BpeOptions options;
  options.byte_level = byte_level;
  if (!field["unk_token"].is_null()) {
    TPSERVE_ASSIGN_OR_RETURN(options.unk_token, field["unk_token"].String());
  }
  TPSERVE_ASSIGN_OR_RETURN(options.fuse_unk, field["fuse_unk"].BoolOr(false));
  TPSERVE_ASSIGN_OR_RETURN(options.byte_fallback, field["byte_fallback"].BoolOr(false));
  TPSERVE_ASSIGN_OR_RETURN(options.ignore_merges, field["ignore_merges"].BoolOr(false));
  TPSERVE_ASSIGN_OR_RETURN(auto vocab, LoadVocab(field["vocab"]));
  TPSERVE_ASSIGN_OR_RETURN(auto merges, LoadMerges(field["merges"]));
  absl::StatusOr<std::unique_ptr<BpeModel>> model =
      BpeModel::Create(vocab, merges, std::move(options));
  if (!model.ok()) return field.Error(std::string(model.status().message()));
  return model;
}

absl::StatusOr<std::vector<AddedToken>> LoadAddedTokens(const JsonField& field,
                                                        const BpeModel& model) {
  std::vector<AddedToken> tokens;
  if (field.is_null()) return tokens;
  TPSERVE_RETURN_IF_ERROR(field.ExpectArray());
  // HF re-adds each token on load: an existing id if the content has one, else
  // the next id after the model's entries and the added tokens so far.
  StringMap<int32_t> assigned;
  int32_t max_added = -1;
  for (size_t i = 0; i < field.value().size(); ++i) {
    const JsonField item = field.At(i);
    AddedToken token;
    TPSERVE_ASSIGN_OR_RETURN(token.content, item["content"].String());
    TPSERVE_ASSIGN_OR_RETURN(int64_t listed_id, item["id"].Int());
    TPSERVE_ASSIGN_OR_RETURN(token.special, item["special"].BoolOr(false));
    TPSERVE_ASSIGN_OR_RETURN(token.single_word, item["single_word"].BoolOr(false));
    TPSERVE_ASSIGN_OR_RETURN(token.lstrip, item["lstrip"].BoolOr(false));
    TPSERVE_ASSIGN_OR_RETURN(token.rstrip, item["rstrip"].BoolOr(false));
    TPSERVE_ASSIGN_OR_RETURN(token.normalized, item["normalized"].BoolOr(!token.special));
    if (token.content.empty()) continue;
    TPSERVE_RETURN_IF_ERROR(ValidateUtf8(token.content));
    int32_t id;
    if (auto it = assigned.find(token.content); it != assigned.end()) {
      id = it->second;
    } else if (std::optional<int32_t> existing = model.TokenToId(token.content)) {
      id = *existing;
    } else {
      const int32_t count = model.entry_count();
      id = max_added < 0 ? count : (max_added >= count || count == 0 ? max_added + 1 : count);
    }
    if (id != listed_id) {
      return item["id"].Error(absl::StrCat("'", token.content, "' is listed with id ", listed_id,
                                           " but Hugging Face tokenizers gives it id ", id));
    }
    assigned[token.content] = id;
    max_added = std::max(max_added, id);
    token.id = id;
    tokens.push_back(std::move(token));
  }
  return tokens;
}

}  // namespace tpserve
