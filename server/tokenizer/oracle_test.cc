// Compares encode/decode with what Hugging Face tokenizers produced for the
// committed corpus (tests/tokenizer/data/*/expected.jsonl) and for random id
// sequences (decode.jsonl): ids and strings must be identical.
#include <atomic>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "server/tokenizer/tokenizer.h"

namespace tpserve {
namespace {

constexpr char kDataDir[] = "tests/tokenizer/data/";

std::vector<nlohmann::json> ReadJsonLines(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::vector<nlohmann::json> rows;
  for (std::string line; std::getline(in, line);) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

std::string Show(const std::vector<int32_t>& ids) { return nlohmann::json(ids).dump(); }

class OracleTest : public testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto tokenizer = Tokenizer::FromPath(kDataDir + GetParam());
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = *std::move(tokenizer);
  }
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_P(OracleTest, EncodeAndDecodeMatchCorpus) {
  const auto rows = ReadJsonLines(kDataDir + GetParam() + "/expected.jsonl");
  ASSERT_GT(rows.size(), 200u);
  int failures = 0;
  for (const auto& row : rows) {
    const std::string text = row["text"];
    const auto ids = row["ids"].get<std::vector<int32_t>>();
    const auto ids_special = row["ids_special"].get<std::vector<int32_t>>();
    auto got = tokenizer_->Encode(text, false);
    ASSERT_TRUE(got.ok()) << got.status();
    auto got_special = tokenizer_->Encode(text, true);
    ASSERT_TRUE(got_special.ok()) << got_special.status();
    EXPECT_EQ(*got, ids) << "text: " << nlohmann::json(text).dump() << "\n got " << Show(*got)
                         << "\nwant " << Show(ids);
    EXPECT_EQ(*got_special, ids_special) << "text: " << nlohmann::json(text).dump();
    EXPECT_EQ(*tokenizer_->Decode(ids, false), row["decoded"].get<std::string>());
    EXPECT_EQ(*tokenizer_->Decode(ids_special, false),
              row["decoded_special"].get<std::string>());
    EXPECT_EQ(*tokenizer_->Decode(ids_special, true),
              row["decoded_special_skip"].get<std::string>());
    if (HasFailure() && ++failures > 10) break;
  }
}

TEST_P(OracleTest, DecodeMatchesRandomIdSequences) {
  const auto rows = ReadJsonLines(kDataDir + GetParam() + "/decode.jsonl");
  ASSERT_GT(rows.size(), 100u);
  for (const auto& row : rows) {
    const auto ids = row["ids"].get<std::vector<int32_t>>();
    auto decoded = tokenizer_->Decode(ids, false);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, row["decoded"].get<std::string>()) << Show(ids);
    EXPECT_EQ(*tokenizer_->Decode(ids, true), row["decoded_skip"].get<std::string>())
        << Show(ids);
    if (HasFailure()) break;
  }
}

TEST_P(OracleTest, ConcurrentEncodesAgree) {
  const auto rows = ReadJsonLines(kDataDir + GetParam() + "/expected.jsonl");
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = t; i < rows.size() * 2; i += 3) {
        const auto& row = rows[i % rows.size()];
        auto ids = tokenizer_->Encode(row["text"].get<std::string>(), false);
        if (!ids.ok() || *ids != row["ids"].get<std::vector<int32_t>>()) ++mismatches;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(mismatches.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(RealTokenizers, OracleTest,
                         testing::Values("gpt2", "qwen2", "llama3", "mistral", "mistral3"),
                         [](const testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace tpserve
