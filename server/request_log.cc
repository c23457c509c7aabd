#include "server/request_log.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "base/log_escape.h"

namespace tpserve {
namespace {

std::string Field(absl::string_view untrusted) {
  return absl::StrReplaceAll(LogEscape(untrusted), {{"\"", "\\x22"}, {" ", "\\x20"}});
}

std::string Millis(double seconds) { return absl::StrFormat("%.1f", seconds * 1e3); }

}  // namespace

std::string RequestLogLine(uint64_t serial, const std::string& request_id,
                           const absl::Status& status, const RequestRecord& record) {
  int prompt = 0, cached = 0, completion = 0;
  double queue_s = 0;
  std::vector<std::string> reasons;
  for (const FinishedCompletion& c : record.finished) {
    prompt += c.prompt_tokens;
    cached += c.cached_prompt_tokens;
    completion += c.completion_tokens;
    queue_s = std::max(queue_s, c.timing.queue_s);
    reasons.push_back(FinishReasonLabel(c.reason));
  }
  std::string line = absl::StrCat(
      "request ", serial, " id=", request_id.empty() ? "-" : Field(request_id),
      " status=", absl::StatusCodeToString(status.code()), " completions=", record.completions,
      " prompt_tokens=", prompt, " cached_tokens=", cached, " completion_tokens=", completion,
      " queue_ms=", Millis(queue_s),
      " ttft_ms=", record.first_token_s ? Millis(*record.first_token_s) : "-",
      " duration_ms=", Millis(record.duration_s),
      " finish=", reasons.empty() ? "-" : absl::StrJoin(reasons, ","));
  if (!status.ok()) {
    absl::StrAppend(&line, " error=\"",
                    absl::StrReplaceAll(LogEscape(status.message()), {{"\"", "\\x22"}}), "\"");
  }
  return line;
}

}  // namespace tpserve
