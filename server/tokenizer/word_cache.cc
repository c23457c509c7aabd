#include "server/tokenizer/word_cache.h"

namespace tpserve {

bool WordCache::Lookup(std::string_view word, std::vector<int32_t>* ids) const {
  if (word.size() > kMaxWordBytes) return false;
  Shard& shard = ShardFor(word);
  absl::MutexLock lock(&shard.mu);
  auto it = shard.words.find(word);
  if (it == shard.words.end()) return false;
  ids->insert(ids->end(), it->second.begin(), it->second.end());
  return true;
}

void WordCache::Insert(std::string_view word, const int32_t* begin, const int32_t* end) const {
  if (word.size() > kMaxWordBytes) return;
  Shard& shard = ShardFor(word);
  absl::MutexLock lock(&shard.mu);
  if (shard.words.size() >= kShardCapacity) shard.words.clear();
  shard.words.try_emplace(word, begin, end);
}

}  // namespace tpserve
