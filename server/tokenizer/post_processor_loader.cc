// LoadPostProcessor (declared in component_loader.h).
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "server/tokenizer/component_loader.h"

namespace tpserve {
namespace {

using Pieces = std::vector<PostProcessor::Piece>;

Pieces SequenceOnly() { return {PostProcessor::Piece{true, {}}}; }

// Replaces the sequence in `outer` with `inner`.
Pieces Compose(const Pieces& outer, const Pieces& inner) {
  Pieces out;
  for (const PostProcessor::Piece& piece : outer) {
    if (piece.is_sequence) {
      out.insert(out.end(), inner.begin(), inner.end());
    } else {
      out.push_back(piece);
    }
  }
  return out;
}

absl::StatusOr<std::vector<int32_t>> LoadIds(const JsonField& field) {
  TPSERVE_RETURN_IF_ERROR(field.ExpectArray());
  std::vector<int32_t> ids;
  for (size_t i = 0; i < field.value().size(); ++i) {
    TPSERVE_ASSIGN_OR_RETURN(int64_t id, field.At(i).Int());
    if (id < 0 || id > INT32_MAX) return field.At(i).Error("id out of range");
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

absl::StatusOr<Pieces> LoadTemplate(const JsonField& field) {
  const JsonField specials = field["special_tokens"];
  TPSERVE_RETURN_IF_ERROR(specials.ExpectObject());
  const JsonField single = field["single"];
  TPSERVE_RETURN_IF_ERROR(single.ExpectArray());
  Pieces pieces;
  for (size_t i = 0; i < single.value().size(); ++i) {
    const JsonField item = single.At(i);
    if (item.Has("Sequence")) {
      TPSERVE_ASSIGN_OR_RETURN(std::string id, item["Sequence"]["id"].String());
      if (id != "A") return item["Sequence"]["id"].Error("a single template can only hold A");
      pieces.push_back({true, {}});
      continue;
    }
    if (!item.Has("SpecialToken")) return item.Error("expected SpecialToken or Sequence");
    TPSERVE_ASSIGN_OR_RETURN(std::string name, item["SpecialToken"]["id"].String());
    if (!specials.Has(name)) {
      return item["SpecialToken"]["id"].Error(
          absl::StrCat("'", name, "' is not in special_tokens"));
    }
    TPSERVE_ASSIGN_OR_RETURN(std::vector<int32_t> ids, LoadIds(specials[name]["ids"]));
    pieces.push_back({false, std::move(ids)});
  }
  return pieces;
}

// BertProcessing / RobertaProcessing: [cls, sequence, sep] from ["token", id] pairs.
absl::StatusOr<Pieces> LoadClsSep(const JsonField& field) {
  Pieces pieces;
  for (const char* key : {"cls", "sep"}) {
    const JsonField pair = field[key];
    TPSERVE_RETURN_IF_ERROR(pair.ExpectArray());
    TPSERVE_ASSIGN_OR_RETURN(int64_t id, pair.At(1).Int());
    if (id < 0 || id > INT32_MAX) return pair.At(1).Error("id out of range");
    pieces.push_back({false, {static_cast<int32_t>(id)}});
  }
  return Pieces{pieces[0], {true, {}}, pieces[1]};
}

}  // namespace

absl::StatusOr<std::vector<PostProcessor::Piece>> LoadPostProcessor(const JsonField& field) {
  TPSERVE_RETURN_IF_ERROR(field.ExpectObject());
  TPSERVE_ASSIGN_OR_RETURN(std::string type, field["type"].String());
  if (type == "TemplateProcessing") return LoadTemplate(field);
  if (type == "ByteLevel") return SequenceOnly();
  if (type == "BertProcessing" || type == "RobertaProcessing") return LoadClsSep(field);
  if (type == "Sequence") {
    const JsonField list = field["processors"];
    TPSERVE_RETURN_IF_ERROR(list.ExpectArray());
    Pieces current = SequenceOnly();
    for (size_t i = 0; i < list.value().size(); ++i) {
      TPSERVE_ASSIGN_OR_RETURN(Pieces step, LoadPostProcessor(list.At(i)));
      current = Compose(step, current);
    }
    return current;
  }
  return field["type"].Error(absl::StrCat("'", type, "' is not supported"));
}

}  // namespace tpserve
