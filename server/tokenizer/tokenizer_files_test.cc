// Tokenizer::FromPath reads only regular files, and no more than its caps: a FIFO in the
// model directory does not block it, a symlink into the hub cache's blobs/ still loads.
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "base/fifo_testing.h"
#include "server/tokenizer/tokenizer.h"

namespace tpserve {
namespace {

std::string MakeDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp ? tmp : "/tmp", "/", name);
  ::mkdir(dir.c_str(), 0755);
  return dir;
}

// A fixture's file, by absolute path (the test's working directory is its runfiles).
std::string Fixture(const std::string& file) {
  char* path = ::realpath(absl::StrCat("tests/tokenizer/data/llama3/", file).c_str(), nullptr);
  EXPECT_NE(path, nullptr) << file;
  std::string result = path ? path : "";
  ::free(path);
  return result;
}

void MakeSparseFile(const std::string& path, uint64_t size) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(size)), 0);
  ::close(fd);
}

TEST(TokenizerFilesTest, LoadsThroughSymlinks) {
  const std::string dir = MakeDir("linked");
  for (const char* file : {"tokenizer.json", "tokenizer_config.json"}) {
    ASSERT_EQ(::symlink(Fixture(file).c_str(), absl::StrCat(dir, "/", file).c_str()), 0);
  }
  auto tokenizer = Tokenizer::FromPath(dir);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_TRUE((*tokenizer)->config().bos_id.has_value());
}

TEST(TokenizerFilesTest, RefusesAFifoTokenizerJsonWithoutBlocking) {
  const std::string dir = MakeDir("fifo");
  const std::string fifo = dir + "/tokenizer.json";
  ASSERT_TRUE(MakeFifo(fifo));
  absl::Status status;
  EXPECT_TRUE(ReturnsWithin(absl::Seconds(5), fifo,
                            [&] { status = Tokenizer::FromPath(dir).status(); }));
  EXPECT_EQ(status.message(), fifo + " is a FIFO, not a regular file");
}

TEST(TokenizerFilesTest, DoesNotBlockOnAFifoTokenizerConfig) {
  const std::string dir = MakeDir("fifo_config");
  ASSERT_EQ(::symlink(Fixture("tokenizer.json").c_str(), (dir + "/tokenizer.json").c_str()), 0);
  const std::string fifo = dir + "/tokenizer_config.json";
  ASSERT_TRUE(MakeFifo(fifo));
  absl::Status status;
  EXPECT_TRUE(ReturnsWithin(absl::Seconds(5), fifo,
                            [&] { status = Tokenizer::FromPath(dir).status(); }));
  // Refused by name, not skipped as if absent.
  EXPECT_EQ(status.message(), fifo + " is a FIFO, not a regular file");
}

TEST(TokenizerFilesTest, TokenizerJsonIsCappedAt256MiB) {
  const std::string dir = MakeDir("huge");
  const std::string path = dir + "/tokenizer.json";
  // Sparse files: fstat reports the size, nothing is written.
  MakeSparseFile(path, (uint64_t{256} << 20) + 1);
  EXPECT_EQ(Tokenizer::FromPath(dir).status().message(),
            path + " is 268435457 bytes, over the cap of 268435456 bytes");
  // Over the 64 MiB cap of config-style JSON, a tokenizer.json is still read (and here
  // refused as JSON, being zeros).
  MakeSparseFile(path, (uint64_t{64} << 20) + 1);
  EXPECT_NE(Tokenizer::FromPath(dir).status().message().find("not valid JSON"),
            absl::string_view::npos)
      << Tokenizer::FromPath(dir).status();
}

}  // namespace
}  // namespace tpserve
