#include "client/output.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tpserve {
namespace {

nlohmann::json LogprobsJson(
    const google::protobuf::RepeatedPtrField<v1::TokenLogprob>& positions) {
  nlohmann::json out = nlohmann::json::array();
  for (const v1::TokenLogprob& p : positions) {
    nlohmann::json top = nlohmann::json::array();
    for (const v1::TopLogprob& t : p.top()) {
      top.push_back({{"token_id", t.token_id()}, {"logprob", t.logprob()}, {"text", t.text()}});
    }
    out.push_back({{"token_id", p.token_id()}, {"logprob", p.logprob()}, {"top", top}});
  }
  return out;
}

}  // namespace

std::string StatusCodeName(grpc::StatusCode code) {
  static const char* const kNames[] = {
      "OK",        "CANCELLED",          "UNKNOWN",          "INVALID_ARGUMENT",
      "DEADLINE_EXCEEDED", "NOT_FOUND",  "ALREADY_EXISTS",   "PERMISSION_DENIED",
      "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
      "UNIMPLEMENTED", "INTERNAL",       "UNAVAILABLE",      "DATA_LOSS",
      "UNAUTHENTICATED"};
  const int index = static_cast<int>(code);
  if (index < 0 || index >= static_cast<int>(std::size(kNames))) {
    return absl::StrCat("CODE_", index);
  }
  return kNames[index];
}

std::string FinishReasonName(v1::FinishReason reason) {
  switch (reason) {
    case v1::FINISH_REASON_LENGTH:
      return "length";
    case v1::FINISH_REASON_STOP:
      return "stop";
    case v1::FINISH_REASON_EOS:
      return "eos";
    case v1::FINISH_REASON_CANCELLED:
      return "cancelled";
    case v1::FINISH_REASON_TOOL_CALLS:
      return "tool_calls";
    default:
      return "";
  }
}

void AppendGenerateChunk(const v1::GenerateResponse& chunk, v1::GenerateResponse* whole) {
  whole->mutable_token_ids()->MergeFrom(chunk.token_ids());
  whole->mutable_text()->append(chunk.text());
  whole->mutable_logprobs()->MergeFrom(chunk.logprobs());
  whole->mutable_prompt_logprobs()->MergeFrom(chunk.prompt_logprobs());
  if (chunk.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
    whole->set_finish_reason(chunk.finish_reason());
  }
  if (chunk.has_usage()) *whole->mutable_usage() = chunk.usage();
}

nlohmann::json GenerateJson(const v1::GenerateResponse& whole) {
  nlohmann::json out = {
      {"token_ids", std::vector<int32_t>(whole.token_ids().begin(), whole.token_ids().end())},
      {"text", whole.text()},
      {"finish_reason", FinishReasonName(whole.finish_reason())},
      {"usage",
       {{"prompt_tokens", whole.usage().prompt_tokens()},
        {"completion_tokens", whole.usage().completion_tokens()},
        {"cached_prompt_tokens", whole.usage().cached_prompt_tokens()}}},
      {"logprobs", LogprobsJson(whole.logprobs())},
  };
  if (whole.prompt_logprobs_size() > 0) {
    out["prompt_logprobs"] = LogprobsJson(whole.prompt_logprobs());
  }
  return out;
}

nlohmann::json ErrorJson(const grpc::Status& status) {
  return {{"error",
           {{"code", StatusCodeName(status.error_code())}, {"message", status.error_message()}}}};
}

std::string GenerateTrailer(const v1::GenerateResponse& whole) {
  return absl::StrCat("token_ids: ", absl::StrJoin(whole.token_ids(), " "),
                      "\nfinish_reason: ", FinishReasonName(whole.finish_reason()),
                      "  prompt_tokens: ", whole.usage().prompt_tokens(),
                      "  completion_tokens: ", whole.usage().completion_tokens(),
                      "  cached_prompt_tokens: ", whole.usage().cached_prompt_tokens(), "\n");
}

std::string ErrorLine(const grpc::Status& status) {
  return absl::StrCat("error: ", StatusCodeName(status.error_code()), ": ",
                      status.error_message());
}

}  // namespace tpserve
