#include "base/log.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spdlog/spdlog.h"

namespace tpserve {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

TEST(LogTest, LinesCarryTimeLevelAndNameAndSplitByLevel) {
  ASSERT_TRUE(InitLogging("prog", "info").ok());
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  spdlog::debug("hidden {}", 1);
  spdlog::info("serving on {}", "127.0.0.1:5");
  spdlog::warn("careful");
  spdlog::error("broken: {}", 42);
  const std::string out = testing::internal::GetCapturedStdout();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_THAT(out, MatchesRegex("[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3} "
                                "info prog: serving on 127\\.0\\.0\\.1:5\n"));
  EXPECT_THAT(err, HasSubstr(" warning prog: careful\n"));
  EXPECT_THAT(err, HasSubstr(" error prog: broken: 42\n"));
  EXPECT_THAT(out + err, testing::Not(HasSubstr("hidden")));
}

TEST(LogTest, LevelFiltersAndNamesChange) {
  ASSERT_TRUE(InitLogging("worker", "warning").ok());
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  spdlog::info("not shown");
  SetLogName("worker rank 1/2 100%");
  spdlog::warn("shown");
  EXPECT_EQ(testing::internal::GetCapturedStdout(), "");
  EXPECT_THAT(testing::internal::GetCapturedStderr(),
              HasSubstr(" warning worker rank 1/2 100%: shown\n"));
  ASSERT_TRUE(InitLogging("debugging", "debug").ok());
  testing::internal::CaptureStdout();
  spdlog::debug("now shown");
  EXPECT_THAT(testing::internal::GetCapturedStdout(), HasSubstr(" debug debugging: now shown\n"));
}

TEST(LogTest, RefusesUnknownLevels) {
  for (const char* level : {"", "verbose", "INFO", "warn"}) {
    const absl::Status s = ValidateLogLevel(level);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << level;
    EXPECT_THAT(s.message(), HasSubstr("--log-level must be debug, info, warning or error"));
  }
  EXPECT_FALSE(InitLogging("x", "loud").ok());
  for (const char* level : {"debug", "info", "warning", "error"}) {
    EXPECT_TRUE(ValidateLogLevel(level).ok()) << level;
  }
}

}  // namespace
}  // namespace tpserve
