// Tokenizer::FromPath / FromJson: tokenizer.json (+ tokenizer_config.json) to a
// Tokenizer. Every error names the file and field.
#include <sys/stat.h>

#include <cstdint>
#include <initializer_list>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/json_fields.h"
#include "base/json_file.h"
#include "base/status_macros.h"
#include "server/tokenizer/component_loader.h"
#include "server/tokenizer/string_map.h"
#include "server/tokenizer/tokenizer.h"
#include "server/tokenizer/tokenizer_model_loader.h"

namespace tpserve {
namespace {

absl::StatusOr<nlohmann::json> ParseJson(std::string_view text, std::string_view file) {
  nlohmann::json json = nlohmann::json::parse(text.begin(), text.end(), nullptr,
                                              /*allow_exceptions=*/false);
  if (json.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(AbslView(file), ": not valid JSON"));
  if (!json.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(AbslView(file), ": expected a JSON object"));
  }
  return json;
}

// A regular file only (a FIFO would block start-up; /dev/zero would fill memory), capped.
// tokenizer.json holds the whole vocabulary and merges: real ones reach 20-35 MB (Gemma 3's
// 262k-token one is ~33 MB), so 256 MiB leaves room for larger vocabularies and still
// bounds memory. tokenizer_config.json is config-style JSON and gets that cap.
absl::StatusOr<std::string> ReadFile(const std::string& path) {
  constexpr uint64_t kMaxTokenizerJsonBytes = uint64_t{256} << 20;
  const bool config = absl::EndsWith(path, "tokenizer_config.json");
  return ReadTextFile(path, config ? kMaxJsonFileBytes : kMaxTokenizerJsonBytes);
}

bool IsDirectory(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

// A token in tokenizer_config.json: "text" or {"content": "text", ...}.
absl::StatusOr<std::optional<std::string>> ConfigToken(const JsonField& field) {
  if (field.is_null()) return std::optional<std::string>();
  if (field.value().is_object()) return field["content"].String();
  return field.String();
}

absl::StatusOr<TokenizerConfig> LoadConfig(const nlohmann::json& json, const Tokenizer& tok) {
  const JsonField root(json, /*source=*/"", "tokenizer_config.json");
  TokenizerConfig config;
  TPSERVE_ASSIGN_OR_RETURN(config.bos_token, ConfigToken(root["bos_token"]));
  TPSERVE_ASSIGN_OR_RETURN(config.eos_token, ConfigToken(root["eos_token"]));
  for (auto [token, id, name] : {std::make_tuple(&config.bos_token, &config.bos_id, "bos_token"),
                                 std::make_tuple(&config.eos_token, &config.eos_id, "eos_token")}) {
    if (!token->has_value()) continue;
    *id = tok.TokenToId(**token);
    if (!id->has_value()) return root[name].Error(absl::StrCat("'", **token, "' is not a token"));
  }
  for (auto [flag, name] : {std::make_pair(&config.add_bos_token, "add_bos_token"),
                            std::make_pair(&config.add_eos_token, "add_eos_token")}) {
    if (!root[name].is_null()) {
      TPSERVE_ASSIGN_OR_RETURN(*flag, root[name].Bool());
    }
  }
  const JsonField chat = root["chat_template"];
  if (chat.value().is_string()) {
    config.chat_template = chat.value().get<std::string>();
  } else if (chat.value().is_array() && !chat.value().empty()) {  // named templates
    TPSERVE_ASSIGN_OR_RETURN(config.chat_template, chat.At(0)["template"].String());
    for (size_t i = 0; i < chat.value().size(); ++i) {
      if (chat.At(i)["name"].value() == "default") {
        TPSERVE_ASSIGN_OR_RETURN(config.chat_template, chat.At(i)["template"].String());
      }
    }
  } else if (!chat.is_null()) {
    return chat.Error("expected a string or a list of named templates");
  }
  return config;
}

// Null, or a non-negative integer.
absl::Status ExpectOptionalCount(const JsonField& field) {
  if (field.is_null()) return absl::OkStatus();
  TPSERVE_ASSIGN_OR_RETURN(int64_t count, field.Int());
  return count >= 0 ? absl::OkStatus() : field.Error("expected a non-negative integer");
}

// Null, or one of `names`.
absl::Status ExpectOptionalName(const JsonField& field, std::initializer_list<const char*> names) {
  if (field.is_null()) return absl::OkStatus();
  TPSERVE_ASSIGN_OR_RETURN(std::string name, field.String());
  for (const char* allowed : names) {
    if (name == allowed) return absl::OkStatus();
  }
  return field.Error(absl::StrCat("'", name, "' is not one of ", absl::StrJoin(names, ", ")));
}

// truncation and padding are ignored (see Tokenizer::FromPath); these check only
// that the fields present have HF's types, so real files pass and garbled ones fail.
absl::Status CheckTruncation(const JsonField& field) {
  TPSERVE_RETURN_IF_ERROR(field.ExpectObject());
  TPSERVE_RETURN_IF_ERROR(ExpectOptionalName(field["direction"], {"Left", "Right"}));
  TPSERVE_RETURN_IF_ERROR(
      ExpectOptionalName(field["strategy"], {"LongestFirst", "OnlyFirst", "OnlySecond"}));
  TPSERVE_RETURN_IF_ERROR(ExpectOptionalCount(field["max_length"]));
  return ExpectOptionalCount(field["stride"]);
}

absl::Status CheckPadding(const JsonField& field) {
  TPSERVE_RETURN_IF_ERROR(field.ExpectObject());
  const JsonField strategy = field["strategy"];
  if (strategy.value().is_object()) {  // {"Fixed": length}
    TPSERVE_ASSIGN_OR_RETURN(int64_t length, strategy["Fixed"].Int());
    if (length < 0) return strategy["Fixed"].Error("expected a non-negative integer");
  } else {
    TPSERVE_RETURN_IF_ERROR(ExpectOptionalName(strategy, {"BatchLongest"}));
  }
  TPSERVE_RETURN_IF_ERROR(ExpectOptionalName(field["direction"], {"Left", "Right"}));
  for (const char* key : {"pad_to_multiple_of", "pad_id", "pad_type_id"}) {
    TPSERVE_RETURN_IF_ERROR(ExpectOptionalCount(field[key]));
  }
  return field["pad_token"].StringOr("").status();
}

absl::StatusOr<TokenizerParts> LoadParts(const nlohmann::json& json) {
  const JsonField root(json);
  if (!root["truncation"].is_null()) TPSERVE_RETURN_IF_ERROR(CheckTruncation(root["truncation"]));
  if (!root["padding"].is_null()) TPSERVE_RETURN_IF_ERROR(CheckPadding(root["padding"]));
  TokenizerParts parts;
  bool byte_level = false;
  if (!root["normalizer"].is_null()) {
    TPSERVE_ASSIGN_OR_RETURN(parts.normalizer, LoadNormalizer(root["normalizer"]));
  }
  if (!root["pre_tokenizer"].is_null()) {
    TPSERVE_ASSIGN_OR_RETURN(parts.pre_tokenizer,
                             LoadPreTokenizer(root["pre_tokenizer"], &byte_level));
  }
  TPSERVE_ASSIGN_OR_RETURN(parts.model, LoadBpeModel(root["model"], byte_level));
  TPSERVE_ASSIGN_OR_RETURN(std::vector<AddedToken> added,
                           LoadAddedTokens(root["added_tokens"], *parts.model));
  TPSERVE_ASSIGN_OR_RETURN(parts.added,
                           AddedVocabulary::Create(std::move(added), parts.normalizer.get()));
  if (!root["post_processor"].is_null()) {
    TPSERVE_ASSIGN_OR_RETURN(std::vector<PostProcessor::Piece> single,
                             LoadPostProcessor(root["post_processor"]));
    parts.post_processor = std::make_unique<PostProcessor>(std::move(single));
  }
  if (!root["decoder"].is_null()) {
    TPSERVE_ASSIGN_OR_RETURN(parts.decoder, LoadDecoder(root["decoder"]));
  }
  return parts;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(std::string_view json,
                                                               std::string_view config_json) {
  TPSERVE_ASSIGN_OR_RETURN(nlohmann::json parsed, ParseJson(json, "tokenizer.json"));
  absl::StatusOr<TokenizerParts> parts = LoadParts(parsed);
  if (!parts.ok()) {
    return absl::Status(parts.status().code(),
                        absl::StrCat("tokenizer.json: ", parts.status().message()));
  }
  auto tokenizer = std::make_unique<Tokenizer>(*std::move(parts));
  if (!config_json.empty()) {
    TPSERVE_ASSIGN_OR_RETURN(nlohmann::json config, ParseJson(config_json, "tokenizer_config.json"));
    TPSERVE_ASSIGN_OR_RETURN(tokenizer->parts_.config, LoadConfig(config, *tokenizer));
  }
  return tokenizer;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromPath(const std::string& path) {
  const bool dir = IsDirectory(path);
  const std::string json_path = dir ? absl::StrCat(path, "/tokenizer.json") : path;
  const size_t slash = json_path.rfind('/');
  const std::string folder = slash == std::string::npos ? "." : json_path.substr(0, slash);
  TPSERVE_ASSIGN_OR_RETURN(std::string json, ReadFile(json_path));
  // Only a missing tokenizer_config.json is "none": a FIFO, device or oversized one is an
  // error naming it, not silently skipped.
  absl::StatusOr<std::string> config = ReadFile(absl::StrCat(folder, "/tokenizer_config.json"));
  if (!config.ok() && !absl::IsNotFound(config.status())) return config.status();
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      FromJson(json, config.ok() ? std::string_view(*config) : std::string_view());
  if (!tokenizer.ok()) {
    return absl::Status(tokenizer.status().code(),
                        absl::StrCat(folder, "/", tokenizer.status().message()));
  }
  return tokenizer;
}

}  // namespace tpserve
