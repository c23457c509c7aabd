// Tokenizer: a Hugging Face tokenizer.json (BPE family) in C++, id for id equal to
// the `tokenizers` library. Loaded once (see tokenizer_loader.cc), then immutable:
// Encode and Decode are safe from many threads at once. The frontend encodes each
// request and decodes streamed ids (see IncrementalDetokenizer).
//
// Errors: bad input (invalid UTF-8, unknown ids) is InvalidArgument; a file that
// is malformed or uses features tpserve does not reproduce fails at load with
// the field named.
#ifndef TPSERVE_SERVER_TOKENIZER_TOKENIZER_H_
#define TPSERVE_SERVER_TOKENIZER_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/tokenizer/added_vocabulary.h"
#include "server/tokenizer/bpe_model.h"
#include "server/tokenizer/decoder.h"
#include "server/tokenizer/normalizer.h"
#include "server/tokenizer/post_processor.h"
#include "server/tokenizer/pre_tokenizer.h"

namespace tpserve {

// From tokenizer_config.json, when present next to tokenizer.json.
struct TokenizerConfig {
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  std::optional<int32_t> bos_id;
  std::optional<int32_t> eos_id;
  // What the model's config asks for; encode() follows tokenizer.json's
  // post-processor, as Hugging Face tokenizers does.
  std::optional<bool> add_bos_token;
  std::optional<bool> add_eos_token;
  std::string chat_template;  // kept for the chat endpoint
};

// The loaded pipeline; any part but the model and added vocabulary may be null.
struct TokenizerParts {
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<BpeModel> model;
  std::unique_ptr<AddedVocabulary> added;
  std::unique_ptr<PostProcessor> post_processor;
  std::unique_ptr<Decoder> decoder;
  TokenizerConfig config;
};

class Tokenizer {
 public:
  // `path` is a tokenizer.json or a directory holding one (and optionally
  // tokenizer_config.json).
  //
  // tokenizer.json's `truncation` and `padding` are accepted and ignored: they tell
  // HF's encode how to cut and pad batches (for training), while serving encodes each
  // prompt whole and unpadded, as vLLM and TGI do, and checks its length against the
  // model's context itself. Their shape is still checked, so a garbled file fails.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromPath(const std::string& path);
  // `json` is the content of a tokenizer.json; `config_json` of a
  // tokenizer_config.json, or empty.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJson(std::string_view json,
                                                             std::string_view config_json = {});

  explicit Tokenizer(TokenizerParts parts);

  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                              bool add_special_tokens) const;
  // Ids the vocabulary lacks (past id_bound(), or holes) are skipped, as Hugging
  // Face's decode does; a negative id is INVALID_ARGUMENT.
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids,
                                     bool skip_special_tokens) const;

  // One past the largest id the tokenizer has a token for or Encode can give: over
  // the model vocabulary, the added tokens and the ids the post-processor adds. A
  // model with fewer embedding rows cannot take every id this tokenizer produces.
  int32_t id_bound() const { return id_bound_; }
  std::optional<int32_t> TokenToId(std::string_view token) const;
  const TokenizerConfig& config() const { return parts_.config; }
  // True for a <0xNN> token that the decoder joins with the tokens after it.
  bool IsByteFallbackToken(int32_t id) const;
  // True for an id that skip_special_tokens drops: one whose decode form is the content
  // of a special token (HF's test, so a special token its normalizer changes is kept).
  bool IsSpecialToken(int32_t id) const;

 private:
  absl::Status EncodeSegment(std::string_view segment, bool at_origin,
                             std::vector<int32_t>* ids) const;
  // The string Decode hands the decoder for `id`; nullptr for an id with no token.
  const std::string* IdToToken(int32_t id) const;

  TokenizerParts parts_;
  int32_t id_bound_;
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_TOKENIZER_TOKENIZER_H_
