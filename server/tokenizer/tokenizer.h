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
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromPath(const std::string& path);
  // `json` is the content of a tokenizer.json; `config_json` of a
  // tokenizer_config.json, or empty.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJson(std::string_view json,
                                                             std::string_view config_json = {});

  explicit Tokenizer(TokenizerParts parts);

  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                              bool add_special_tokens) const;
  // Ids the vocabulary lacks (past vocab_size(), or holes) are skipped, as Hugging
  // Face's decode does; a negative id is INVALID_ARGUMENT.
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids,
                                     bool skip_special_tokens) const;

  // One past the largest id, added tokens included.
  int32_t vocab_size() const { return vocab_size_; }
  std::optional<int32_t> TokenToId(std::string_view token) const;
  const TokenizerConfig& config() const { return parts_.config; }
  // True for a <0xNN> token that the decoder joins with the tokens after it.
  bool IsByteFallbackToken(int32_t id) const;
  // True for an added token marked special (dropped by skip_special_tokens).
  bool IsSpecialToken(int32_t id) const;

 private:
  absl::Status EncodeSegment(std::string_view segment, bool at_origin,
                             std::vector<int32_t>* ids) const;
  const std::string* IdToToken(int32_t id) const;

  TokenizerParts parts_;
  int32_t vocab_size_;
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_TOKENIZER_TOKENIZER_H_
