#include "base/json_file.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tpserve {
namespace {

using ::testing::HasSubstr;

TEST(JsonFileTest, ParsesAnObject) {
  absl::StatusOr<nlohmann::json> root = ParseJsonObject(R"({"a": {"b": 1}})", "x.json", true);
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ((*root)["a"]["b"], 1);
}

TEST(JsonFileTest, RejectsInvalidJsonAndNonObjects) {
  absl::StatusOr<nlohmann::json> bad = ParseJsonObject("{oops", "x.json", false);
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("x.json: not valid JSON: "));
  EXPECT_EQ(ParseJsonObject("[1]", "x.json", false).status().message(),
            "x.json: expected a JSON object, got array");
}

TEST(JsonFileTest, DuplicateKeysOnlyWhenAsked) {
  const char* text = R"({"a": 1, "b": {"c": 1, "c": 2}, "c": 3})";
  EXPECT_TRUE(ParseJsonObject(text, "x.json", false).ok());
  EXPECT_EQ(ParseJsonObject(text, "x.json", true).status().message(),
            "x.json: key \"c\" appears twice in one JSON object");
  // The same key in two different objects is fine.
  EXPECT_TRUE(ParseJsonObject(R"({"c": {"c": 1}, "d": {"c": 2}})", "x.json", true).ok());
}

TEST(JsonFileTest, ReadTextFile) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(tmp ? tmp : "/tmp", "/json_file_test.json");
  std::ofstream(path, std::ios::binary) << "{\"a\": 1}";
  absl::StatusOr<std::string> text = ReadTextFile(path);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "{\"a\": 1}");
  absl::StatusOr<std::string> missing = ReadTextFile(path + ".nope");
  EXPECT_TRUE(absl::IsNotFound(missing.status()));
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("json_file_test.json.nope: cannot open: "));
}

}  // namespace
}  // namespace tpserve
