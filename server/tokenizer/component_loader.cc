#include "server/tokenizer/component_loader.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/utf8.h"

namespace tpserve {
namespace {

absl::StatusOr<std::string> TypeOf(const JsonField& field) {
  TPSERVE_RETURN_IF_ERROR(field.ExpectObject());
  return field["type"].String();
}

absl::Status Unsupported(const JsonField& field, const std::string& type) {
  return field["type"].Error(absl::StrCat("'", type, "' is not supported"));
}

// {"String": s} or {"Regex": r}.
absl::StatusOr<std::unique_ptr<Regex>> LoadPattern(const JsonField& field, std::string* literal) {
  TPSERVE_RETURN_IF_ERROR(field.ExpectObject());
  if (field.Has("String")) {
    TPSERVE_ASSIGN_OR_RETURN(*literal, field["String"].String());
    return std::unique_ptr<Regex>();
  }
  if (!field.Has("Regex")) return field.Error("expected {\"String\": ...} or {\"Regex\": ...}");
  TPSERVE_ASSIGN_OR_RETURN(std::string pattern, field["Regex"].String());
  absl::StatusOr<std::unique_ptr<Regex>> regex = Regex::Compile(pattern);
  if (!regex.ok()) return field["Regex"].Error(std::string(regex.status().message()));
  return regex;
}

absl::StatusOr<std::unique_ptr<ReplaceNormalizer>> LoadReplace(const JsonField& field) {
  std::string literal;
  TPSERVE_ASSIGN_OR_RETURN(std::unique_ptr<Regex> regex, LoadPattern(field["pattern"], &literal));
  TPSERVE_ASSIGN_OR_RETURN(std::string content, field["content"].String());
  return std::make_unique<ReplaceNormalizer>(std::move(literal), std::move(regex),
                                             std::move(content));
}

// Metaspace's scheme: "prepend_scheme", or the older boolean "add_prefix_space".
absl::StatusOr<PrependScheme> LoadPrependScheme(const JsonField& field) {
  if (field.Has("prepend_scheme")) {
    TPSERVE_ASSIGN_OR_RETURN(std::string scheme, field["prepend_scheme"].String());
    if (scheme == "always") return PrependScheme::kAlways;
    if (scheme == "first") return PrependScheme::kFirst;
    if (scheme == "never") return PrependScheme::kNever;
    return field["prepend_scheme"].Error("expected \"always\", \"first\" or \"never\"");
  }
  TPSERVE_ASSIGN_OR_RETURN(bool add_prefix_space, field["add_prefix_space"].BoolOr(true));
  return add_prefix_space ? PrependScheme::kAlways : PrependScheme::kNever;
}

absl::StatusOr<std::string> LoadReplacementChar(const JsonField& field) {
  TPSERVE_ASSIGN_OR_RETURN(std::string replacement, field.String());
  if (replacement.empty() || !ValidateUtf8(replacement).ok() ||
      Utf8LeadLength(static_cast<unsigned char>(replacement[0])) != replacement.size()) {
    return field.Error("expected exactly one character");
  }
  return replacement;
}

absl::StatusOr<SplitBehavior> LoadBehavior(const JsonField& field) {
  TPSERVE_ASSIGN_OR_RETURN(std::string name, field.String());
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  return field.Error(absl::StrCat("unknown split behavior '", name, "'"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Normalizer>> LoadNormalizer(const JsonField& field) {
  TPSERVE_ASSIGN_OR_RETURN(std::string type, TypeOf(field));
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(NormalizationForm::kNfc);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(NormalizationForm::kNfd);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(NormalizationForm::kNfkc);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(NormalizationForm::kNfkd);
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "Prepend") {
    TPSERVE_ASSIGN_OR_RETURN(std::string prefix, field["prepend"].String());
    return std::make_unique<PrependNormalizer>(std::move(prefix));
  }
  if (type == "Replace") return LoadReplace(field);
  if (type == "Strip") {
    TPSERVE_ASSIGN_OR_RETURN(bool left, field["strip_left"].BoolOr(true));
    TPSERVE_ASSIGN_OR_RETURN(bool right, field["strip_right"].BoolOr(true));
    return std::make_unique<StripNormalizer>(left, right);
  }
  if (type == "Sequence") {
    const JsonField list = field["normalizers"];
    TPSERVE_RETURN_IF_ERROR(list.ExpectArray());
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (size_t i = 0; i < list.value().size(); ++i) {
      TPSERVE_ASSIGN_OR_RETURN(std::unique_ptr<Normalizer> step, LoadNormalizer(list.At(i)));
      steps.push_back(std::move(step));
    }
    return std::make_unique<SequenceNormalizer>(std::move(steps));
  }
  return Unsupported(field, type);
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> LoadPreTokenizer(const JsonField& field,
                                                               bool* byte_level) {
  TPSERVE_ASSIGN_OR_RETURN(std::string type, TypeOf(field));
  if (*byte_level) return field.Error("pre-tokenizers after ByteLevel are not supported");
  if (type == "Split") {
    std::string literal;
    TPSERVE_ASSIGN_OR_RETURN(std::unique_ptr<Regex> regex,
                             LoadPattern(field["pattern"], &literal));
    if (regex == nullptr) {
      TPSERVE_ASSIGN_OR_RETURN(regex, Regex::Compile(literal, true));
    }
    TPSERVE_ASSIGN_OR_RETURN(SplitBehavior behavior, LoadBehavior(field["behavior"]));
    TPSERVE_ASSIGN_OR_RETURN(bool invert, field["invert"].BoolOr(false));
    return std::make_unique<SplitPreTokenizer>(std::move(regex), behavior, invert);
  }
  if (type == "ByteLevel") {
    TPSERVE_ASSIGN_OR_RETURN(bool add_prefix_space, field["add_prefix_space"].BoolOr(true));
    TPSERVE_ASSIGN_OR_RETURN(bool use_regex, field["use_regex"].BoolOr(true));
    std::unique_ptr<Regex> regex;
    if (use_regex) {
      TPSERVE_ASSIGN_OR_RETURN(regex, Regex::Compile(ByteLevelPreTokenizer::kGpt2Pattern));
    }
    *byte_level = true;
    return std::make_unique<ByteLevelPreTokenizer>(add_prefix_space, std::move(regex));
  }
  if (type == "Metaspace") {
    TPSERVE_ASSIGN_OR_RETURN(std::string replacement, LoadReplacementChar(field["replacement"]));
    TPSERVE_ASSIGN_OR_RETURN(PrependScheme scheme, LoadPrependScheme(field));
    TPSERVE_ASSIGN_OR_RETURN(bool split, field["split"].BoolOr(true));
    return std::make_unique<MetaspacePreTokenizer>(std::move(replacement), scheme, split);
  }
  if (type == "Digits") {
    TPSERVE_ASSIGN_OR_RETURN(bool individual, field["individual_digits"].BoolOr(false));
    return std::make_unique<DigitsPreTokenizer>(individual);
  }
  if (type == "WhitespaceSplit") return std::make_unique<WhitespaceSplitPreTokenizer>();
  if (type == "Sequence") {
    const JsonField list = field["pretokenizers"];
    TPSERVE_RETURN_IF_ERROR(list.ExpectArray());
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (size_t i = 0; i < list.value().size(); ++i) {
      TPSERVE_ASSIGN_OR_RETURN(std::unique_ptr<PreTokenizer> step,
                               LoadPreTokenizer(list.At(i), byte_level));
      steps.push_back(std::move(step));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(steps));
  }
  return Unsupported(field, type);
}

absl::StatusOr<std::unique_ptr<Decoder>> LoadDecoder(const JsonField& field) {
  TPSERVE_ASSIGN_OR_RETURN(std::string type, TypeOf(field));
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Metaspace") {
    TPSERVE_ASSIGN_OR_RETURN(std::string replacement, LoadReplacementChar(field["replacement"]));
    TPSERVE_ASSIGN_OR_RETURN(PrependScheme scheme, LoadPrependScheme(field));
    return std::make_unique<MetaspaceDecoder>(std::move(replacement),
                                              scheme != PrependScheme::kNever);
  }
  if (type == "Replace") {
    TPSERVE_ASSIGN_OR_RETURN(std::unique_ptr<ReplaceNormalizer> replace, LoadReplace(field));
    return std::make_unique<ReplaceDecoder>(std::move(replace));
  }
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    TPSERVE_ASSIGN_OR_RETURN(std::string content, LoadReplacementChar(field["content"]));
    TPSERVE_ASSIGN_OR_RETURN(int64_t start, field["start"].Int());
    TPSERVE_ASSIGN_OR_RETURN(int64_t stop, field["stop"].Int());
    if (start < 0 || stop < 0) return field.Error("start and stop must be non-negative");
    size_t pos = 0;
    return std::make_unique<StripDecoder>(NextCodePoint(content, &pos), start, stop);
  }
  if (type == "Sequence") {
    const JsonField list = field["decoders"];
    TPSERVE_RETURN_IF_ERROR(list.ExpectArray());
    std::vector<std::unique_ptr<Decoder>> steps;
    for (size_t i = 0; i < list.value().size(); ++i) {
      TPSERVE_ASSIGN_OR_RETURN(std::unique_ptr<Decoder> step, LoadDecoder(list.At(i)));
      steps.push_back(std::move(step));
    }
    return std::make_unique<SequenceDecoder>(std::move(steps));
  }
  return Unsupported(field, type);
}

}  // namespace tpserve
