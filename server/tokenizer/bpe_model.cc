#include "server/tokenizer/bpe_model.h"

#include <algorithm>
#include <limits>
#include <queue>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "base/utf8.h"
#include "server/tokenizer/byte_level.h"

namespace tpserve {
namespace {

constexpr int32_t kMaxVocabId = 1 << 26;
// Words up to this many symbols merge by scanning; longer ones use a heap.
constexpr size_t kScanLimit = 48;
constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // U+2581

// True when `token` holds U+2581 right after a character other than U+2581.
bool HasInnerMetaspace(std::string_view token) {
  for (size_t pos = token.find(kMetaspace, 1); pos != std::string_view::npos;
       pos = token.find(kMetaspace, pos + 1)) {
    if (pos < kMetaspace.size() || token.substr(pos - kMetaspace.size(), kMetaspace.size()) !=
                                       kMetaspace) {
      return true;
    }
  }
  return false;
}

}  // namespace

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::Create(
    const std::vector<std::pair<std::string, int32_t>>& vocab,
    const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options) {
  std::unique_ptr<BpeModel> model(new BpeModel(std::move(options)));
  for (const auto& [token, id] : vocab) {
    if (id < 0 || id >= kMaxVocabId) {
      return absl::InvalidArgumentError(
          absl::StrCat("model.vocab: id ", id, " of '", token, "' is out of range"));
    }
    if (static_cast<size_t>(id) >= model->id_to_token_.size()) {
      model->id_to_token_.resize(id + 1);
      model->has_id_.resize(id + 1, false);
    }
    if (model->has_id_[id]) {
      return absl::InvalidArgumentError(absl::StrCat("model.vocab: id ", id, " is used by both '",
                                                     model->id_to_token_[id], "' and '", token,
                                                     "'"));
    }
    model->has_id_[id] = true;
    model->id_to_token_[id] = token;
    model->token_to_id_[token] = id;
    if (model->options_.byte_level) {
      if (std::optional<std::string> bytes = ByteLevelToBytes(token)) {
        model->word_to_id_[*bytes] = id;
      }
    } else {
      model->word_to_id_[token] = id;
    }
  }
  for (int b = 0; b < 256; ++b) {
    const auto word = model->word_to_id_.find(std::string(1, static_cast<char>(b)));
    model->byte_ids_[b] = model->options_.byte_level && word != model->word_to_id_.end()
                              ? word->second
                              : -1;
    const auto fallback = model->token_to_id_.find(absl::StrFormat("<0x%02X>", b));
    model->byte_fallback_ids_[b] =
        fallback == model->token_to_id_.end() ? -1 : fallback->second;
  }
  model->split_before_metaspace_ = !model->options_.byte_level;
  for (const auto& [token, id] : vocab) {
    if (HasInnerMetaspace(token)) model->split_before_metaspace_ = false;
  }
  if (model->options_.unk_token.has_value()) {
    if (auto unk = model->TokenToId(*model->options_.unk_token)) model->unk_id_ = *unk;
  }
  model->merges_.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const auto& [left, right] = merges[i];
    const std::optional<int32_t> a = model->TokenToId(left);
    const std::optional<int32_t> b = model->TokenToId(right);
    const std::optional<int32_t> merged = model->TokenToId(left + right);
    if (!a || !b || !merged) {
      const std::string& missing = !a ? left : !b ? right : left + right;
      return absl::InvalidArgumentError(absl::StrCat("model.merges[", i, "]: token '", missing,
                                                     "' is not in model.vocab"));
    }
    model->merges_[PairKey(*a, *b)] = Merge{static_cast<int32_t>(i), *merged};
  }
  return model;
}

std::optional<int32_t> BpeModel::TokenToId(std::string_view token) const {
  auto it = token_to_id_.find(token);
  if (it == token_to_id_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::IdToToken(int32_t id) const {
  if (id < 0 || id >= size() || !has_id_[id]) return nullptr;
  return &id_to_token_[id];
}

absl::Status BpeModel::InitialSymbols(std::string_view word, std::vector<int32_t>* symbols) const {
  bool pending_unk = false;
  size_t pos = 0;
  std::string mapped;
  while (pos < word.size()) {
    std::string_view ch;
    int32_t id = -1;
    if (options_.byte_level) {
      const auto byte = static_cast<unsigned char>(word[pos]);
      id = byte_ids_[byte];
      pos += 1;
      if (id >= 0 && !pending_unk) {
        symbols->push_back(id);
        continue;
      }
      mapped.clear();  // an unknown byte is its alphabet character
      AppendUtf8(ByteToUnicode(byte), &mapped);
      ch = mapped;
    } else {
      const size_t len = Utf8LeadLength(static_cast<unsigned char>(word[pos]));
      ch = word.substr(pos, len);
      auto it = word_to_id_.find(ch);
      if (it != word_to_id_.end()) id = it->second;
      pos += len;
    }
    if (id >= 0) {
      if (pending_unk) symbols->push_back(unk_id_);
      pending_unk = false;
      symbols->push_back(id);
      continue;
    }
    if (options_.byte_fallback) {
      bool all_bytes = true;
      for (unsigned char b : ch) all_bytes &= byte_fallback_ids_[b] >= 0;
      if (all_bytes) {
        for (unsigned char b : ch) symbols->push_back(byte_fallback_ids_[b]);
        continue;
      }
    }
    if (!options_.unk_token.has_value()) continue;  // HF drops the character
    if (unk_id_ < 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("model.unk_token '", *options_.unk_token, "' is not in model.vocab"));
    }
    if (pending_unk && !options_.fuse_unk) symbols->push_back(unk_id_);
    pending_unk = true;
  }
  if (pending_unk) symbols->push_back(unk_id_);
  return absl::OkStatus();
}

void BpeModel::MergeByScan(std::vector<int32_t>* symbols) const {
  std::vector<int32_t>& s = *symbols;
  // pair[i] describes the merge of s[i] and s[i + 1].
  size_t pairs = s.size() > 1 ? s.size() - 1 : 0;
  thread_local std::vector<Merge> pair_storage;  // scratch
  pair_storage.resize(pairs);
  Merge* pair = pair_storage.data();
  const auto lookup = [&](size_t i) {
    const Merge* m = FindMerge(s[i], s[i + 1]);
    pair[i] = m ? *m : Merge{std::numeric_limits<int32_t>::max(), -1};
  };
  for (size_t i = 0; i + 1 < s.size(); ++i) lookup(i);
  while (pairs > 0) {
    size_t best = 0;
    for (size_t i = 1; i < pairs; ++i) {
      if (pair[i].rank < pair[best].rank) best = i;
    }
    if (pair[best].new_id < 0) break;
    s[best] = pair[best].new_id;
    s.erase(s.begin() + best + 1);
    std::copy(pair + best + 1, pair + pairs, pair + best);
    --pairs;
    if (best > 0) lookup(best - 1);
    if (best < pairs) lookup(best);
  }
}

void BpeModel::MergeByHeap(std::vector<int32_t>* symbols) const {
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
  };
  struct Entry {
    int32_t rank;
    int32_t pos;
    int32_t new_id;
    bool operator>(const Entry& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  const int32_t n = static_cast<int32_t>(symbols->size());
  std::vector<Symbol> sym(n);
  for (int32_t i = 0; i < n; ++i) sym[i] = {(*symbols)[i], i - 1, i + 1 < n ? i + 1 : -1};
  std::vector<Entry> storage;
  storage.reserve(n);
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue(
      std::greater<Entry>(), std::move(storage));
  const auto push = [&](int32_t left, int32_t right) {
    if (const Merge* m = FindMerge(sym[left].id, sym[right].id)) {
      queue.push({m->rank, left, m->new_id});
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i, i + 1);
  std::vector<bool> removed(n, false);
  while (!queue.empty()) {
    const Entry top = queue.top();
    queue.pop();
    if (removed[top.pos] || sym[top.pos].next < 0) continue;
    const int32_t right = sym[top.pos].next;
    const Merge* m = FindMerge(sym[top.pos].id, sym[right].id);
    if (m == nullptr || m->new_id != top.new_id) continue;  // stale entry
    sym[top.pos].id = top.new_id;
    removed[right] = true;
    sym[top.pos].next = sym[right].next;
    if (sym[right].next >= 0) sym[sym[right].next].prev = top.pos;
    if (sym[top.pos].prev >= 0) push(sym[top.pos].prev, top.pos);
    if (sym[top.pos].next >= 0) push(top.pos, sym[top.pos].next);
  }
  symbols->clear();
  for (int32_t i = 0; i >= 0 && i < n; i = sym[i].next) symbols->push_back(sym[i].id);
}

absl::Status BpeModel::Tokenize(std::string_view word, std::vector<int32_t>* ids) const {
  if (word.empty()) return absl::OkStatus();
  if (options_.ignore_merges) {
    auto it = word_to_id_.find(word);
    if (it != word_to_id_.end()) {
      ids->push_back(it->second);
      return absl::OkStatus();
    }
  }
  if (!split_before_metaspace_) return TokenizePiece(word, ids);
  size_t start = 0;
  for (size_t pos = word.find(kMetaspace, 1); pos != std::string_view::npos;
       pos = word.find(kMetaspace, pos + 1)) {
    if (pos >= kMetaspace.size() &&
        word.compare(pos - kMetaspace.size(), kMetaspace.size(), kMetaspace) == 0) {
      continue;  // inside a run of U+2581
    }
    TPSERVE_RETURN_IF_ERROR(TokenizePiece(word.substr(start, pos - start), ids));
    start = pos;
  }
  return TokenizePiece(word.substr(start), ids);
}

absl::Status BpeModel::TokenizePiece(std::string_view word, std::vector<int32_t>* ids) const {
  if (cache_.Lookup(word, ids)) return absl::OkStatus();
  thread_local std::vector<int32_t> symbols;  // scratch
  symbols.clear();
  TPSERVE_RETURN_IF_ERROR(InitialSymbols(word, &symbols));
  if (symbols.size() <= kScanLimit) {
    MergeByScan(&symbols);
  } else {
    MergeByHeap(&symbols);
  }
  ids->insert(ids->end(), symbols.begin(), symbols.end());
  cache_.Insert(word, symbols.data(), symbols.data() + symbols.size());
  return absl::OkStatus();
}

}  // namespace tpserve
