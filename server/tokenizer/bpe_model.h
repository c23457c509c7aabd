// BpeModel: Hugging Face's BPE model — initial symbols per character (or per byte
// for byte-level vocabularies), unknown-token and byte-fallback handling, then
// merges applied lowest rank first, leftmost first on ties. Built once by the
// loader; immutable and safe from many threads.
#ifndef TPSERVE_SERVER_TOKENIZER_BPE_MODEL_H_
#define TPSERVE_SERVER_TOKENIZER_BPE_MODEL_H_

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "server/tokenizer/string_map.h"
#include "server/tokenizer/word_cache.h"

namespace tpserve {

struct BpeOptions {
  std::optional<std::string> unk_token;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
  // Words arrive as raw bytes and the vocabulary is written in the ByteLevel
  // alphabet (set when the pre-tokenizer ends with ByteLevel).
  bool byte_level = false;
};

class BpeModel {
 public:
  // Errors name the offending merge index or token.
  static absl::StatusOr<std::unique_ptr<BpeModel>> Create(
      const std::vector<std::pair<std::string, int32_t>>& vocab,
      const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options);

  // Appends the ids of one pre-tokenized word.
  absl::Status Tokenize(std::string_view word, std::vector<int32_t>* ids) const;

  std::optional<int32_t> TokenToId(std::string_view token) const;
  // nullptr when no vocabulary entry has this id.
  const std::string* IdToToken(int32_t id) const;
  // One past the largest id in the vocabulary.
  int32_t size() const { return static_cast<int32_t>(id_to_token_.size()); }
  // Number of vocabulary entries (HF's get_vocab_size, which numbers added tokens).
  int32_t entry_count() const { return static_cast<int32_t>(token_to_id_.size()); }

  // Merge loops; public so tests can compare them. Both give HF's result.
  void MergeByScan(std::vector<int32_t>* symbols) const;
  void MergeByHeap(std::vector<int32_t>* symbols) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  static uint64_t PairKey(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  const Merge* FindMerge(int32_t a, int32_t b) const {
    auto it = merges_.find(PairKey(a, b));
    return it == merges_.end() ? nullptr : &it->second;
  }
  absl::Status InitialSymbols(std::string_view word, std::vector<int32_t>* symbols) const;
  // Tokenizes without the ignore_merges shortcut, through the cache.
  absl::Status TokenizePiece(std::string_view piece, std::vector<int32_t>* ids) const;

  explicit BpeModel(BpeOptions options) : options_(std::move(options)) {}

  BpeOptions options_;
  StringMap<int32_t> token_to_id_;  // as written in the file
  StringMap<int32_t> word_to_id_;  // in the model's input space
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  absl::flat_hash_map<uint64_t, Merge> merges_;
  std::array<int32_t, 256> byte_ids_;           // byte-level: id of each single byte
  std::array<int32_t, 256> byte_fallback_ids_;  // id of "<0xNN>", or -1
  int32_t unk_id_ = -1;
  // No vocabulary entry holds U+2581 after another character, so no merge can
  // cross the point before a U+2581 that follows another character: long
  // SentencePiece inputs are tokenized piece by piece there, with the same result.
  bool split_before_metaspace_ = false;
  WordCache cache_;
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_TOKENIZER_BPE_MODEL_H_
