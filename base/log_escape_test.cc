#include "base/log_escape.h"

#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace tpserve {
namespace {

TEST(LogEscapeTest, ControlBytesBackslashesAndNonAsciiBecomeText) {
  EXPECT_EQ(LogEscape("req-42 ok"), "req-42 ok");
  EXPECT_EQ(LogEscape("a\nINFO forged line\r"), "a\\x0aINFO forged line\\x0d");
  EXPECT_EQ(LogEscape("\\x0a"), "\\x5cx0a");  // a literal backslash cannot fake an escape
  EXPECT_EQ(LogEscape("\x1b[31m"), "\\x1b[31m");
  EXPECT_EQ(LogEscape("\xff\xc3\xa9"), "\\xff\\xc3\\xa9");
  EXPECT_EQ(LogEscape(std::string("a\0b", 3)), "a\\x00b");
}

TEST(LogEscapeTest, LongTextIsCutAndItsLengthNamed) {
  const std::string megabyte(1 << 20, 'x');
  const std::string out = LogEscape(megabyte);
  EXPECT_LE(out.size(), kMaxLoggedBytes + 32);
  EXPECT_TRUE(absl::EndsWith(out, "...[1048576 bytes]")) << out.substr(out.size() - 40);
  const std::string newlines(4096, '\n');
  EXPECT_LE(LogEscape(newlines).size(), kMaxLoggedBytes + 32);
}

}  // namespace
}  // namespace tpserve
