// Streams every fixture id sequence through IncrementalDetokenizer and checks the
// concatenated chunks equal Hugging Face's decode, and each chunk is valid UTF-8.
#include "server/tokenizer/incremental_detokenizer.h"

#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/utf8.h"

namespace tpserve {
namespace {

constexpr char kDataDir[] = "tests/tokenizer/data/";

std::vector<nlohmann::json> ReadJsonLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> rows;
  for (std::string line; std::getline(in, line);) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

std::string Stream(const Tokenizer& tokenizer, const std::vector<int32_t>& ids, bool skip) {
  IncrementalDetokenizer detok(&tokenizer, skip);
  std::string out;
  for (int32_t id : ids) {
    auto chunk = detok.Step(id);
    EXPECT_TRUE(chunk.ok()) << chunk.status();
    EXPECT_TRUE(ValidateUtf8(*chunk).ok());
    out += *chunk;
  }
  auto rest = detok.Flush();
  EXPECT_TRUE(rest.ok()) << rest.status() << nlohmann::json(ids).dump() << skip;
  if (!rest.ok()) return out;
  return out + *rest;
}

class IncrementalDetokenizerTest : public testing::TestWithParam<std::string> {};

TEST_P(IncrementalDetokenizerTest, ConcatenationEqualsDecode) {
  auto tokenizer = Tokenizer::FromPath(kDataDir + GetParam());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const Tokenizer& tok = **tokenizer;
  for (const auto& row : ReadJsonLines(kDataDir + GetParam() + "/expected.jsonl")) {
    const auto ids = row["ids"].get<std::vector<int32_t>>();
    const auto ids_special = row["ids_special"].get<std::vector<int32_t>>();
    EXPECT_EQ(Stream(tok, ids, false), row["decoded"].get<std::string>())
        << nlohmann::json(ids).dump();
    EXPECT_EQ(Stream(tok, ids_special, false), row["decoded_special"].get<std::string>());
    EXPECT_EQ(Stream(tok, ids_special, true), row["decoded_special_skip"].get<std::string>());
    if (HasFailure()) return;
  }
  for (const auto& row : ReadJsonLines(kDataDir + GetParam() + "/decode.jsonl")) {
    const auto ids = row["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(Stream(tok, ids, false), row["decoded"].get<std::string>())
        << nlohmann::json(ids).dump();
    EXPECT_EQ(Stream(tok, ids, true), row["decoded_skip"].get<std::string>())
        << nlohmann::json(ids).dump();
    if (HasFailure()) return;
  }
}

TEST_P(IncrementalDetokenizerTest, HoldsIncompleteCharacters) {
  auto tokenizer = Tokenizer::FromPath(kDataDir + GetParam());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  auto ids = (*tokenizer)->Encode("é😀", false);
  ASSERT_TRUE(ids.ok());
  IncrementalDetokenizer detok(tokenizer->get(), false);
  std::string out;
  for (int32_t id : *ids) {
    auto chunk = detok.Step(id);
    ASSERT_TRUE(chunk.ok());
    EXPECT_EQ(chunk->find(kReplacementChar), std::string::npos) << *chunk;
    out += *chunk;
  }
  out += *detok.Flush();
  EXPECT_EQ(out, *(*tokenizer)->Decode(*ids, false));
}

// A model may sample an id its tokenizer lacks (padded vocabulary rows, as Qwen2 has):
// it adds no text, as in Hugging Face's decode, and the stream goes on.
TEST_P(IncrementalDetokenizerTest, UnknownIdsAddNoTextNegativeOnesAreRefused) {
  auto tokenizer = Tokenizer::FromPath(kDataDir + GetParam());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  IncrementalDetokenizer detok(tokenizer->get(), false);
  EXPECT_EQ(detok.Step(-1).status().code(), absl::StatusCode::kInvalidArgument);
  auto ids = (*tokenizer)->Encode("ok then", false);
  ASSERT_TRUE(ids.ok() && ids->size() >= 2);
  std::string out;
  out += *detok.Step((*ids)[0]);
  EXPECT_EQ(*detok.Step((*tokenizer)->id_bound()), "");
  EXPECT_EQ(*detok.Step((*tokenizer)->id_bound() + 1000), "");
  for (size_t i = 1; i < ids->size(); ++i) out += *detok.Step((*ids)[i]);
  EXPECT_EQ(out + *detok.Flush(), *(*tokenizer)->Decode(*ids, false));
}

INSTANTIATE_TEST_SUITE_P(RealTokenizers, IncrementalDetokenizerTest,
                         testing::Values("gpt2", "qwen2", "llama3", "mistral", "mistral3"),
                         [](const testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace tpserve
