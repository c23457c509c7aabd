#include "base/regular_file.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
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

std::string TempPath(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return absl::StrCat(tmp ? tmp : "/tmp", "/regular_file_test_", name);
}

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = TempPath(name);
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

std::string Symlink(const std::string& target, const std::string& name) {
  const std::string path = TempPath(name);
  ::unlink(path.c_str());
  EXPECT_EQ(::symlink(target.c_str(), path.c_str()), 0);
  return path;
}

std::string OpenError(const std::string& path) {
  absl::StatusOr<RegularFile> file = RegularFile::Open(path);
  EXPECT_TRUE(!file.ok() && absl::IsInvalidArgument(file.status())) << file.status();
  return file.ok() ? "" : std::string(file.status().message());
}

TEST(RegularFileTest, ReadsARegularFileAndOneBehindASymlink) {
  const std::string path = WriteFile("plain.json", "{\"a\": 1}");
  absl::StatusOr<std::string> text = ReadRegularFile(path, 100);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "{\"a\": 1}");
  // The Hugging Face hub cache: snapshots/<hash>/config.json -> ../../blobs/<sha>.
  text = ReadRegularFile(Symlink(path, "link.json"), 100);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "{\"a\": 1}");
}

TEST(RegularFileTest, TheDescriptorIsBlockingAndCloseOnExec) {
  absl::StatusOr<RegularFile> file = RegularFile::Open(WriteFile("flags.json", "{}"));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(::fcntl(file->fd(), F_GETFL) & O_NONBLOCK, 0);
  EXPECT_NE(::fcntl(file->fd(), F_GETFD) & FD_CLOEXEC, 0);
  EXPECT_EQ(file->size(), 2u);
}

TEST(RegularFileTest, MissingIsNotFound) {
  absl::StatusOr<RegularFile> file = RegularFile::Open(TempPath("nope.json"));
  EXPECT_TRUE(absl::IsNotFound(file.status())) << file.status();
  EXPECT_THAT(std::string(file.status().message()), HasSubstr("nope.json: cannot open: "));
}

TEST(RegularFileTest, RefusesAFifoWithoutBlocking) {
  const std::string fifo = TempPath("config.json");
  ASSERT_TRUE(MakeFifo(fifo));
  std::string error;
  EXPECT_TRUE(ReturnsWithin(absl::Seconds(5), fifo, [&] { error = OpenError(fifo); }));
  EXPECT_EQ(error, fifo + " is a FIFO, not a regular file");
}

TEST(RegularFileTest, RefusesACharacterDeviceBehindASymlink) {
  const std::string link = Symlink("/dev/zero", "zero.json");
  EXPECT_EQ(OpenError(link), link + " (-> /dev/zero) is a character device, not a regular file");
  EXPECT_THAT(OpenError("/dev/null"), HasSubstr("is a character device, not a regular file"));
}

TEST(RegularFileTest, RefusesADirectory) {
  const std::string dir = TempPath("dir.json");
  ::mkdir(dir.c_str(), 0755);
  EXPECT_EQ(OpenError(dir), dir + " is a directory, not a regular file");
}

TEST(RegularFileTest, RefusesASocket) {
  // sun_path holds 108 bytes and TEST_TMPDIR can be longer: bind by a relative name.
  char cwd[4096];
  ASSERT_NE(::getcwd(cwd, sizeof(cwd)), nullptr);
  const char* tmp = std::getenv("TEST_TMPDIR");
  ASSERT_EQ(::chdir(tmp ? tmp : "/tmp"), 0);
  const int sock = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un address = {};
  address.sun_family = AF_UNIX;
  const std::string name = "regular_file_test.sock";
  ::unlink(name.c_str());
  name.copy(address.sun_path, sizeof(address.sun_path) - 1);
  const bool bound = ::bind(sock, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  ASSERT_EQ(::chdir(cwd), 0);
  ASSERT_TRUE(bound);
  const std::string path = absl::StrCat(tmp ? tmp : "/tmp", "/", name);
  EXPECT_EQ(OpenError(path), path + " is a socket, not a regular file");
  ::close(sock);
}

TEST(RegularFileTest, RefusesAFileOverTheCapBeforeReading) {
  const std::string path = WriteFile("big.json", std::string(11, 'x'));
  EXPECT_TRUE(ReadRegularFile(WriteFile("ten.json", std::string(10, 'x')), 10).ok());
  absl::StatusOr<std::string> text = ReadRegularFile(path, 10);
  EXPECT_TRUE(absl::IsInvalidArgument(text.status())) << text.status();
  EXPECT_EQ(text.status().message(), path + " is 11 bytes, over the cap of 10 bytes");
}

TEST(RegularFileTest, StopsReadingAtTheCapWhenTheSizeUnderstates) {
  // A /proc file is regular, reports size 0 and reads as more: the size check passes,
  // so only the cap on what is read stops it (as it would a file that grows).
  const std::string path = "/proc/self/status";
  absl::StatusOr<RegularFile> file = RegularFile::Open(path);
  if (!file.ok() || file->size() != 0) GTEST_SKIP() << "no size-0 /proc/self/status here";
  absl::StatusOr<std::string> text = file->ReadAll(16);
  EXPECT_EQ(text.status().message(),
            path + " holds more than the cap of 16 bytes (0 when opened; it grew, or does not "
                   "report its size)");
  EXPECT_TRUE(ReadRegularFile(path, 1 << 20).ok());
}

}  // namespace
}  // namespace tpserve
