// AddedVocabulary: tokens added on top of the model's vocabulary (special tokens
// like <|im_start|>, user tokens), matched in the text before the model runs, as
// Hugging Face does: leftmost-longest over all contents, then each match honours
// single_word, lstrip and rstrip. Tokens with normalized=true are matched in the
// normalized text, the others in the raw text, and decode from the form they are
// matched in. Immutable after Create; safe from many threads.
#ifndef TPSERVE_SERVER_TOKENIZER_ADDED_VOCABULARY_H_
#define TPSERVE_SERVER_TOKENIZER_ADDED_VOCABULARY_H_

#include <bitset>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "server/tokenizer/normalizer.h"
#include "server/tokenizer/string_map.h"

namespace tpserve {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
};

// A piece of text: an added token's id, or id -1 for text left to the model.
struct AddedSplit {
  size_t begin;
  size_t end;
  int32_t id;
};

// Leftmost-longest multi-pattern matcher over bytes.
class TokenTrie {
 public:
  // Patterns keep their index; empty patterns and repeats never match.
  explicit TokenTrie(const std::vector<std::string>& patterns = {});
  // Non-overlapping matches as (begin, end, pattern index), left to right.
  struct Match {
    size_t begin;
    size_t end;
    int32_t pattern;
  };
  void FindAll(std::string_view text, std::vector<Match>* matches) const;
  bool empty() const { return first_bytes_.none(); }

 private:
  absl::flat_hash_map<uint64_t, int32_t> edges_;  // (node << 8 | byte) -> child
  std::vector<int32_t> terminal_;                 // node -> pattern index or -1
  std::bitset<256> first_bytes_;
};

class AddedVocabulary {
 public:
  // `tokens` have their ids resolved. `normalizer` (may be null) turns the
  // contents of normalized tokens into the patterns matched in normalized text.
  // Repeated contents merge as in HF: a later entry's flags replace an earlier
  // one's, but a content once special stays special and one once normalized keeps
  // its normalized decode form.
  static absl::StatusOr<std::unique_ptr<AddedVocabulary>> Create(std::vector<AddedToken> tokens,
                                                                 const Normalizer* normalizer);

  // Splits `text` on the raw-text tokens (normalized=false) or on the normalized ones.
  void Split(std::string_view text, bool normalized_tokens, std::vector<AddedSplit>* out) const;

  // The string decode hands the decoder for `id` (HF's simple_id_to_token): the
  // content after the normalizer for a normalized token, else the content; nullptr
  // when no added token has this id.
  const std::string* DecodeForm(int32_t id) const;
  // True when `token` is the content of a special token. Decode asks this of decode
  // forms, so, as in HF, a special token that the normalizer changes is never skipped.
  bool IsSpecial(std::string_view token) const { return special_.contains(token); }
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  AddedVocabulary() = default;

  std::vector<AddedToken> tokens_;
  std::vector<std::string> decode_forms_;       // index in tokens_ -> DecodeForm
  absl::flat_hash_map<int32_t, size_t> by_id_;  // id -> index in tokens_
  StringSet special_;
  TokenTrie raw_trie_;
  std::vector<int32_t> raw_ids_;  // pattern index -> index in tokens_
  TokenTrie normalized_trie_;
  std::vector<int32_t> normalized_ids_;
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_TOKENIZER_ADDED_VOCABULARY_H_
