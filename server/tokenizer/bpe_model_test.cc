// BpeModel: the scan and heap merge loops agree on random words, and the UTF-8
// lossy conversion follows the maximal-subpart rule.
#include "server/tokenizer/bpe_model.h"

#include <random>
#include <string>

#include <gtest/gtest.h>

#include "base/utf8.h"

namespace tpserve {
namespace {

// Vocabulary over {a, b, c} with every string up to length 4; merges in a fixed
// pseudo-random order, so ties and rank inversions both occur.
std::unique_ptr<BpeModel> SmallModel() {
  std::vector<std::pair<std::string, int32_t>> vocab;
  std::vector<std::string> words = {"a", "b", "c"};
  for (size_t i = 0; i < words.size(); ++i) {
    if (words[i].size() < 4) {
      for (const char* c : {"a", "b", "c"}) words.push_back(words[i] + c);
    }
  }
  for (size_t i = 0; i < words.size(); ++i) vocab.emplace_back(words[i], i);
  std::vector<std::pair<std::string, std::string>> merges;
  std::mt19937 rng(7);
  for (size_t i = 3; i < words.size(); ++i) {
    const size_t split = 1 + rng() % (words[i].size() - 1);
    merges.emplace_back(words[i].substr(0, split), words[i].substr(split));
  }
  std::shuffle(merges.begin(), merges.end(), rng);
  auto model = BpeModel::Create(vocab, merges, BpeOptions());
  EXPECT_TRUE(model.ok()) << model.status();
  return *std::move(model);
}

TEST(BpeModelTest, ScanAndHeapMergeAgree) {
  auto model = SmallModel();
  std::mt19937 rng(1);
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<int32_t> scan(1 + rng() % 80);
    for (int32_t& id : scan) id = rng() % 3;
    std::vector<int32_t> heap = scan;
    model->MergeByScan(&scan);
    model->MergeByHeap(&heap);
    ASSERT_EQ(scan, heap);
  }
}

TEST(BpeModelTest, UnknownCharactersFuseOrDrop) {
  std::vector<std::pair<std::string, int32_t>> vocab = {{"<unk>", 0}, {"a", 1}, {"<0x62>", 2}};
  BpeOptions options;
  options.unk_token = "<unk>";
  options.fuse_unk = true;
  options.byte_fallback = true;
  auto model = BpeModel::Create(vocab, {}, options);
  ASSERT_TRUE(model.ok());
  std::vector<int32_t> ids;
  ASSERT_TRUE((*model)->Tokenize("axyba", &ids).ok());
  // As in HF: byte-fallback ids go out before the pending (fused) unknown.
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 2, 0, 1}));
  BpeOptions no_unk;  // the same without an unknown token: unknown characters drop
  no_unk.fuse_unk = true;
  no_unk.byte_fallback = true;
  model = BpeModel::Create(vocab, {}, no_unk);
  ids.clear();
  ASSERT_TRUE((*model)->Tokenize("axa", &ids).ok());
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 1}));
}

TEST(BpeModelTest, MergesAcrossMetaspaceStayWhole) {
  // "a▁" + "b" is a merge, so the input may not be cut before its "▁".
  std::vector<std::pair<std::string, int32_t>> vocab = {
      {"a", 0}, {"\xe2\x96\x81", 1}, {"b", 2}, {"a\xe2\x96\x81", 3}, {"a\xe2\x96\x81" "b", 4}};
  auto model = BpeModel::Create(
      vocab, {{"a", "\xe2\x96\x81"}, {"a\xe2\x96\x81", "b"}}, BpeOptions());
  ASSERT_TRUE(model.ok());
  std::vector<int32_t> ids;
  ASSERT_TRUE((*model)->Tokenize("b" "a\xe2\x96\x81" "b", &ids).ok());
  EXPECT_EQ(ids, (std::vector<int32_t>{2, 4}));
}

TEST(BpeModelTest, LongSentencePieceInputsSplitBeforeMetaspace) {
  std::vector<std::pair<std::string, int32_t>> vocab = {
      {"a", 0}, {"\xe2\x96\x81", 1}, {"\xe2\x96\x81" "a", 2}, {"\xe2\x96\x81\xe2\x96\x81", 3}};
  auto model = BpeModel::Create(vocab,
                                {{"\xe2\x96\x81", "a"}, {"\xe2\x96\x81", "\xe2\x96\x81"}},
                                BpeOptions());
  ASSERT_TRUE(model.ok());
  std::string word;
  std::vector<int32_t> expected;
  for (int i = 0; i < 200; ++i) {
    word += i % 3 == 0 ? "\xe2\x96\x81\xe2\x96\x81" : "\xe2\x96\x81" "a";
    expected.push_back(i % 3 == 0 ? 3 : 2);
  }
  std::vector<int32_t> ids;
  ASSERT_TRUE((*model)->Tokenize(word, &ids).ok());
  EXPECT_EQ(ids, expected);
}

TEST(Utf8Test, LossyReplacesMaximalSubparts) {
  EXPECT_EQ(LossyUtf8("a\xe4\xbd"), "a\xef\xbf\xbd");
  EXPECT_EQ(LossyUtf8("\xe4\xbd\xa0"), "\xe4\xbd\xa0");
  EXPECT_EQ(LossyUtf8("\xf0\x9f\x98"), "\xef\xbf\xbd");
  EXPECT_EQ(LossyUtf8("\xed\xa0\x80"), "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(LossyUtf8("\xc0\xaf!"), "\xef\xbf\xbd\xef\xbf\xbd!");
}

}  // namespace
}  // namespace tpserve
