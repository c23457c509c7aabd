#include "base/json_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/fifo_testing.h"
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

std::string TempPath(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return absl::StrCat(tmp ? tmp : "/tmp", "/", name);
}

TEST(JsonFileTest, ReadTextFileRefusesAFifoWithoutBlocking) {
  const std::string fifo = TempPath("fifo_config.json");
  ASSERT_TRUE(MakeFifo(fifo));
  absl::StatusOr<std::string> text;
  EXPECT_TRUE(ReturnsWithin(absl::Seconds(5), fifo, [&] { text = ReadTextFile(fifo); }));
  EXPECT_TRUE(absl::IsInvalidArgument(text.status())) << text.status();
  EXPECT_EQ(text.status().message(), fifo + " is a FIFO, not a regular file");
}

TEST(JsonFileTest, ReadTextFileFollowsSymlinksToRegularFiles) {
  const std::string blob = TempPath("blob_config.json");
  std::ofstream(blob, std::ios::binary) << "{}";
  const std::string link = TempPath("link_config.json");
  ::unlink(link.c_str());
  ASSERT_EQ(::symlink(blob.c_str(), link.c_str()), 0);
  absl::StatusOr<std::string> text = ReadTextFile(link);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "{}");
}

TEST(JsonFileTest, ReadTextFileCapsConfigJsonAt64MiB) {
  EXPECT_EQ(kMaxJsonFileBytes, 64u << 20);
  // Sparse: the size is what fstat reports, no disk is written.
  const std::string path = TempPath("huge_config.json");
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, kMaxJsonFileBytes + 1), 0);
  ::close(fd);
  absl::StatusOr<std::string> text = ReadTextFile(path);
  EXPECT_EQ(text.status().message(),
            path + " is 67108865 bytes, over the cap of 67108864 bytes");
  EXPECT_TRUE(ReadTextFile(path, kMaxJsonFileBytes + 1).ok());
}

}  // namespace
}  // namespace tpserve
