#include "client/bench_dataset.h"

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace tpserve {
namespace {

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = std::string(getenv("TEST_TMPDIR")) + "/" + name;
  std::ofstream(path) << text;
  return path;
}

// One token per word (its length as the id), and a BOS (id 1) with special tokens.
absl::StatusOr<std::vector<int32_t>> WordIds(const std::string& text, bool special) {
  std::vector<int32_t> ids;
  if (special) ids.push_back(1);
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    ids.push_back(static_cast<int32_t>(word.size()) + 1);
  }
  return ids;
}

std::string Words(int n) {
  std::string text;
  for (int i = 0; i < n; ++i) text += "w ";
  return text;
}

std::string Turn(const std::string& from, const std::string& value) {
  return "{\"from\": \"" + from + "\", \"value\": \"" + value + "\"}";
}

TEST(ShareGptTest, ReadsTheFirstTwoTurnsAndSkipsShortConversations) {
  const std::string path = WriteFile(
      "ok.json", "[{\"id\": \"a\", \"conversations\": [" + Turn("human", "hi there") + ", " +
                     Turn("gpt", "hello you") + ", " + Turn("human", "more") + "]},"
                     " {\"conversations\": [" + Turn("human", "alone") + "]},"
                     " {\"conversations\": [" + Turn("human", "x") + ", " + Turn("gpt", "y") +
                     "], \"extra\": 3}]");
  absl::StatusOr<std::vector<Conversation>> got = ReadShareGpt(path);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 2u);
  EXPECT_EQ((*got)[0].prompt, "hi there");
  EXPECT_EQ((*got)[0].reply, "hello you");
  EXPECT_EQ((*got)[1].prompt, "x");
}

TEST(ShareGptTest, BadFilesAreNamedWithTheRuleTheyBreak) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"[{\"conversations\": [", "not valid JSON"},
      {"{\"conversations\": []}", "JSON list"},
      {"[3]", "entry 0 is not an object"},
      {"[{\"turns\": []}]", "entry 0 has no \"conversations\" list"},
      {"[{\"conversations\": [" + Turn("human", "a") + ", {\"from\": \"gpt\", \"value\": 5}]}]",
       "entry 0: conversations[1] must be an object with a string \"value\""},
      {"[{\"conversations\": [" + Turn("human", "a") + "]}]", "no conversation has two turns"},
      {"[]", "no conversation has two turns"},
      {"[\"\xff\"]", "not valid JSON"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string path = WriteFile("bad" + std::to_string(i) + ".json", cases[i].first);
    const absl::StatusOr<std::vector<Conversation>> got = ReadShareGpt(path);
    ASSERT_FALSE(got.ok()) << cases[i].first;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(got.status().message().find(path), std::string::npos) << got.status();
    EXPECT_NE(got.status().message().find(cases[i].second), std::string::npos) << got.status();
  }
  EXPECT_EQ(ReadShareGpt(std::string(getenv("TEST_TMPDIR")) + "/absent.json").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(ShareGptTest, FiltersLikeVllmShufflesBySeedAndOversamples) {
  std::vector<Conversation> conversations = {
      {Words(10), Words(20)},  // passes: 11 + 20
      {Words(2), Words(20)},   // prompt 3 tokens: too short
      {Words(10), Words(3)},   // reply 3 tokens: too short
      {Words(50), Words(10)},  // prompt 51 > max_prompt_len 40
      {Words(30), Words(30)},  // 31 + 30 > max_total_len 60
      {Words(5), Words(8)},    // passes: 6 + 8
  };
  ShareGptOptions o;
  o.num_prompts = 2;
  o.seed = 4;
  o.max_prompt_len = 40;
  o.max_total_len = 60;
  absl::StatusOr<std::vector<BenchPrompt>> got = ShareGptPrompts(conversations, o, WordIds, "f");
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 2u);
  std::vector<std::pair<size_t, int>> shapes;
  for (const BenchPrompt& p : *got) shapes.push_back({p.ids.size(), p.output_len});
  std::sort(shapes.begin(), shapes.end());
  EXPECT_EQ(shapes, (std::vector<std::pair<size_t, int>>{{6, 8}, {11, 20}}));
  EXPECT_EQ((*got)[0].ids[0], 1);  // the prompt's special tokens
  // Seeded: the same seed, the same order.
  EXPECT_EQ(*got, *ShareGptPrompts(conversations, o, WordIds, "f"));
  // More asked than pass: drawn again from the passing ones.
  o.num_prompts = 9;
  got = ShareGptPrompts(conversations, o, WordIds, "f");
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 9u);
  for (const BenchPrompt& p : *got) EXPECT_TRUE(p.output_len == 8 || p.output_len == 20);
  // A fixed output length replaces the reply's (and its minimum).
  o.output_len = 2;
  got = ShareGptPrompts(conversations, o, WordIds, "f");
  ASSERT_TRUE(got.ok()) << got.status();
  for (const BenchPrompt& p : *got) EXPECT_EQ(p.output_len, 2);
  // None passing is an error naming the file and the rule; a tokenizer error passes through.
  o.output_len = 0;
  o.max_total_len = 10;
  const absl::Status none = ShareGptPrompts(conversations, o, WordIds, "data.json").status();
  EXPECT_NE(none.message().find("data.json"), std::string::npos) << none;
  EXPECT_NE(none.message().find("within 10 tokens"), std::string::npos) << none;
  const TokenizeFn broken = [](const std::string&, bool) -> absl::StatusOr<std::vector<int32_t>> {
    return absl::UnavailableError("server gone");
  };
  EXPECT_EQ(ShareGptPrompts(conversations, o, broken, "f").status().code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace tpserve
