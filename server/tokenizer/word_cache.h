// WordCache: memoizes the ids of pre-tokenized words, as Hugging Face's BPE cache
// does; natural text repeats most words, so most words skip the merge loop.
// Sharded by hash, each shard behind its own mutex: safe from many threads. A full
// shard is cleared, so memory stays bounded (about kShards * kShardCapacity words
// of at most kMaxWordBytes bytes).
#ifndef TPSERVE_SERVER_TOKENIZER_WORD_CACHE_H_
#define TPSERVE_SERVER_TOKENIZER_WORD_CACHE_H_

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/tokenizer/string_map.h"

namespace tpserve {

class WordCache {
 public:
  static constexpr size_t kMaxWordBytes = 48;

  // Appends the cached ids of `word` to *ids; false when absent.
  bool Lookup(std::string_view word, std::vector<int32_t>* ids) const;
  // Stores ids[begin, end) for `word` (ignored for long words).
  void Insert(std::string_view word, const int32_t* begin, const int32_t* end) const;

 private:
  static constexpr size_t kShards = 16;
  static constexpr size_t kShardCapacity = 4096;
  struct Shard {
    mutable absl::Mutex mu;
    StringMap<std::vector<int32_t>> words ABSL_GUARDED_BY(mu);
  };
  Shard& ShardFor(std::string_view word) const {
    return shards_[StringViewHash()(word) % kShards];
  }
  mutable std::array<Shard, kShards> shards_;
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_TOKENIZER_WORD_CACHE_H_
