#include "server/tokenizer/added_vocabulary.h"

#include <algorithm>
#include <utility>

#include "base/status_macros.h"
#include "base/utf8.h"
#include "server/tokenizer/unicode.h"

namespace tpserve {
namespace {

// Code point that ends text[0, end): steps back over continuation bytes.
char32_t LastCodePoint(std::string_view text, size_t end, size_t* begin) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  *begin = start;
  size_t pos = start;
  return NextCodePoint(text, &pos);
}

bool EndsWithWord(std::string_view text) {
  size_t begin = 0;
  return !text.empty() && IsWordChar(LastCodePoint(text, text.size(), &begin));
}

bool StartsWithWord(std::string_view text) {
  size_t pos = 0;
  return !text.empty() && IsWordChar(NextCodePoint(text, &pos));
}

// Start of the whitespace run that ends text.
size_t TrailingSpaceStart(std::string_view text) {
  size_t end = text.size();
  while (end > 0) {
    size_t begin = 0;
    if (!IsWhitespace(LastCodePoint(text, end, &begin))) break;
    end = begin;
  }
  return end;
}

// Length of the whitespace run that starts text.
size_t LeadingSpaceLength(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t next = pos;
    if (!IsWhitespace(NextCodePoint(text, &next))) break;
    pos = next;
  }
  return pos;
}

// An entry of the merged added vocabulary, with what HF remembers of the entries
// its content replaced.
struct MergedToken {
  AddedToken token;
  bool ever_special = false;
  bool ever_normalized = false;
};

// One entry per content, in first-seen order; the last entry's flags win.
std::vector<MergedToken> MergeByContent(std::vector<AddedToken> tokens) {
  std::vector<MergedToken> merged;
  StringMap<size_t> index;
  for (AddedToken& token : tokens) {
    if (token.content.empty()) continue;
    auto [it, inserted] = index.try_emplace(token.content, merged.size());
    if (inserted) merged.emplace_back();
    MergedToken& entry = merged[it->second];
    entry.ever_special = entry.ever_special || token.special;
    entry.ever_normalized = entry.ever_normalized || token.normalized;
    entry.token = std::move(token);
  }
  return merged;
}

}  // namespace

TokenTrie::TokenTrie(const std::vector<std::string>& patterns) {
  terminal_.push_back(-1);
  for (size_t p = 0; p < patterns.size(); ++p) {
    const std::string& pattern = patterns[p];
    if (pattern.empty()) continue;
    int32_t node = 0;
    for (unsigned char byte : pattern) {
      const uint64_t key = (static_cast<uint64_t>(node) << 8) | byte;
      auto [it, inserted] = edges_.try_emplace(key, static_cast<int32_t>(terminal_.size()));
      if (inserted) terminal_.push_back(-1);
      node = it->second;
    }
    if (terminal_[node] < 0) terminal_[node] = static_cast<int32_t>(p);
    first_bytes_.set(static_cast<unsigned char>(pattern[0]));
  }
}

void TokenTrie::FindAll(std::string_view text, std::vector<Match>* matches) const {
  size_t pos = 0;
  while (pos < text.size()) {
    if (!first_bytes_.test(static_cast<unsigned char>(text[pos]))) {
      ++pos;
      continue;
    }
    int32_t node = 0;
    size_t best_end = 0;
    int32_t best_pattern = -1;
    for (size_t j = pos; j < text.size(); ++j) {
      const uint64_t key = (static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(text[j]);
      auto it = edges_.find(key);
      if (it == edges_.end()) break;
      node = it->second;
      if (terminal_[node] >= 0) {
        best_end = j + 1;
        best_pattern = terminal_[node];
      }
    }
    if (best_pattern < 0) {
      ++pos;
      continue;
    }
    matches->push_back({pos, best_end, best_pattern});
    pos = best_end;
  }
}

absl::StatusOr<std::unique_ptr<AddedVocabulary>> AddedVocabulary::Create(
    std::vector<AddedToken> tokens, const Normalizer* normalizer) {
  std::unique_ptr<AddedVocabulary> vocab(new AddedVocabulary());
  std::vector<std::string> raw_patterns, norm_patterns;
  for (MergedToken& merged : MergeByContent(std::move(tokens))) {
    const AddedToken& token = merged.token;
    const int32_t index = static_cast<int32_t>(vocab->tokens_.size());
    std::string form = token.content;
    if (merged.ever_normalized && normalizer != nullptr) {
      TPSERVE_ASSIGN_OR_RETURN(form, normalizer->Normalize(form));
    }
    if (token.normalized) {
      norm_patterns.push_back(form);
      vocab->normalized_ids_.push_back(index);
    } else {
      raw_patterns.push_back(token.content);
      vocab->raw_ids_.push_back(index);
    }
    if (merged.ever_special) vocab->special_.insert(token.content);
    vocab->by_id_[token.id] = index;
    vocab->decode_forms_.push_back(std::move(form));
    vocab->tokens_.push_back(std::move(merged.token));
  }
  vocab->raw_trie_ = TokenTrie(raw_patterns);
  vocab->normalized_trie_ = TokenTrie(norm_patterns);
  return vocab;
}

void AddedVocabulary::Split(std::string_view text, bool normalized_tokens,
                            std::vector<AddedSplit>* out) const {
  const TokenTrie& trie = normalized_tokens ? normalized_trie_ : raw_trie_;
  const std::vector<int32_t>& ids = normalized_tokens ? normalized_ids_ : raw_ids_;
  std::vector<TokenTrie::Match> matches;
  if (!trie.empty()) trie.FindAll(text, &matches);
  size_t start_offset = 0;
  for (const TokenTrie::Match& m : matches) {
    const AddedToken& token = tokens_[ids[m.pattern]];
    size_t start = m.begin, stop = m.end;
    if (token.single_word) {
      const bool start_space = start == 0 || !EndsWithWord(text.substr(0, start));
      const bool stop_space = stop == text.size() || !StartsWithWord(text.substr(stop));
      if (!start_space || !stop_space) continue;
    }
    if (token.lstrip) start = std::max(TrailingSpaceStart(text.substr(0, start)), start_offset);
    if (token.rstrip) stop += LeadingSpaceLength(text.substr(stop));
    if (start_offset < start) out->push_back({start_offset, start, -1});
    out->push_back({start, stop, token.id});
    start_offset = stop;
  }
  if (start_offset < text.size()) out->push_back({start_offset, text.size(), -1});
}

const std::string* AddedVocabulary::DecodeForm(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &decode_forms_[it->second];
}

}  // namespace tpserve
