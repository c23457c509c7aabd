#include "server/request_log.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tpserve {
namespace {

TEST(RequestLogTest, OneLineWithTheCallsFigures) {
  RequestRecord r;
  r.completions = 2;
  FinishedCompletion a;
  a.reason = FinishReason::kLength;
  a.prompt_tokens = 12;
  a.cached_prompt_tokens = 0;
  a.completion_tokens = 32;
  a.timing.queue_s = 0.0012;
  FinishedCompletion b = a;
  b.reason = FinishReason::kEos;
  b.cached_prompt_tokens = 12;
  b.completion_tokens = 5;
  b.timing.queue_s = 0.004;
  r.finished = {a, b};
  r.first_token_s = 0.0801;
  r.duration_s = 0.51234;
  EXPECT_EQ(RequestLogLine(57, "abc-1", absl::OkStatus(), r),
            "request 57 id=abc-1 status=OK completions=2 prompt_tokens=24 cached_tokens=12 "
            "completion_tokens=37 queue_ms=4.0 ttft_ms=80.1 duration_ms=512.3 "
            "finish=length,eos");
}

TEST(RequestLogTest, RefusedCallsSayWhyAndUntrustedTextCannotForgeFields) {
  RequestRecord r;
  r.duration_s = 0.0001;
  const std::string line =
      RequestLogLine(3, "x status=OK\n\"", absl::InvalidArgumentError("bad \"top_p\"\nx"), r);
  EXPECT_EQ(line,
            "request 3 id=x\\x20status=OK\\x0a\\x22 status=INVALID_ARGUMENT completions=1 "
            "prompt_tokens=0 cached_tokens=0 completion_tokens=0 queue_ms=0.0 ttft_ms=- "
            "duration_ms=0.1 finish=- error=\"bad \\x22top_p\\x22\\x0ax\"");
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_THAT(RequestLogLine(4, "", absl::OkStatus(), r), testing::HasSubstr(" id=- "));
}

}  // namespace
}  // namespace tpserve
