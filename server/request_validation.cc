#include "server/request_validation.h"

#include <cmath>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/utf8.h"

namespace tpserve {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view rule, float got) {
  return absl::InvalidArgumentError(absl::StrCat(field, " must be ", rule, ", got ", got));
}

absl::Status CheckFloats(const v1::SamplingParams& p) {
  if (p.has_temperature() && !(std::isfinite(p.temperature()) && p.temperature() >= 0)) {
    return Invalid("sampling.temperature", "finite and >= 0", p.temperature());
  }
  if (p.has_top_p() && !(p.top_p() > 0 && p.top_p() <= 1)) {
    return Invalid("sampling.top_p", "in (0, 1]", p.top_p());
  }
  if (!(p.min_p() >= 0 && p.min_p() <= 1)) {
    return Invalid("sampling.min_p", "in [0, 1]", p.min_p());
  }
  if (p.has_repetition_penalty() && !(p.repetition_penalty() >= kMinRepetitionPenalty &&
                                       p.repetition_penalty() <= kMaxRepetitionPenalty)) {
    return Invalid("sampling.repetition_penalty", "in [0.01, 100]", p.repetition_penalty());
  }
  if (!(std::fabs(p.presence_penalty()) <= kMaxAbsPenalty)) {
    return Invalid("sampling.presence_penalty", "in [-2, 2]", p.presence_penalty());
  }
  if (!(std::fabs(p.frequency_penalty()) <= kMaxAbsPenalty)) {
    return Invalid("sampling.frequency_penalty", "in [-2, 2]", p.frequency_penalty());
  }
  return absl::OkStatus();
}

absl::Status CheckCount(absl::string_view field, bool has, int value, int low, int high) {
  if (has && (value < low || value > high)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " must be in [", low, ", ", high, "], got ", value));
  }
  return absl::OkStatus();
}

absl::Status CheckStops(const v1::SamplingParams& p, const RequestLimits& limits) {
  if (p.stop_size() > kMaxStopStrings) {
    return absl::InvalidArgumentError(absl::StrCat("sampling.stop has ", p.stop_size(),
                                                   " strings; at most ", kMaxStopStrings));
  }
  for (int i = 0; i < p.stop_size(); ++i) {
    const std::string field = absl::StrCat("sampling.stop[", i, "]");
    const std::string& stop = p.stop(i);
    if (stop.empty() || stop.size() > kMaxStopStringBytes) {
      return absl::InvalidArgumentError(absl::StrCat(field, " must be 1 to ",
                                                     kMaxStopStringBytes, " bytes, got ",
                                                     stop.size()));
    }
    TPSERVE_RETURN_IF_ERROR(ValidateUtf8Field(stop, field));
  }
  if (p.stop_size() > 0) TPSERVE_RETURN_IF_ERROR(RequireTokenizer(limits, "sampling.stop"));
  if (p.stop_token_ids_size() > kMaxStopTokenIds) {
    return absl::InvalidArgumentError(absl::StrCat("sampling.stop_token_ids has ",
                                                   p.stop_token_ids_size(), " ids; at most ",
                                                   kMaxStopTokenIds));
  }
  return ValidateTokenIds(p.stop_token_ids(), limits.vocab_size, "sampling.stop_token_ids");
}

}  // namespace

absl::Status ValidateSampling(const v1::SamplingParams& p, const RequestLimits& limits) {
  if (p.has_max_tokens() && p.max_tokens() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling.max_tokens must be >= 1, got ", p.max_tokens()));
  }
  // The ranks refuse a k past the vocabulary; refused here, it never reaches them (a
  // plan they refuse would take the whole pool, and every request on it, down).
  if (p.top_k() < -1 || p.top_k() > limits.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sampling.top_k must be -1 or 0 (no limit) or in [1, vocab_size ", limits.vocab_size,
        "], got ", p.top_k()));
  }
  TPSERVE_RETURN_IF_ERROR(CheckFloats(p));
  TPSERVE_RETURN_IF_ERROR(
      CheckCount("sampling.logprobs", p.has_logprobs(), p.logprobs(), 0, kMaxLogprobs));
  TPSERVE_RETURN_IF_ERROR(CheckCount("sampling.prompt_logprobs", p.has_prompt_logprobs(),
                                     p.prompt_logprobs(), 0, kMaxLogprobs));
  TPSERVE_RETURN_IF_ERROR(CheckCount("sampling.n", p.has_n(), p.n(), 1, kMaxCompletions));
  return CheckStops(p, limits);
}

absl::Status ValidateRequestId(absl::string_view id) {
  if (id.size() > kMaxRequestIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat("request_id must be at most ",
                                                   kMaxRequestIdBytes, " bytes, got ", id.size()));
  }
  for (size_t i = 0; i < id.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(id[i]);
    if (c < 0x20 || c > 0x7e) {
      return absl::InvalidArgumentError(absl::StrCat(
          "request_id must be printable ASCII (0x20-0x7e), byte ", i, " is 0x",
          absl::Hex(c, absl::kZeroPad2)));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateGenerateRequest(const v1::GenerateRequest& request,
                                     const RequestLimits& limits) {
  TPSERVE_RETURN_IF_ERROR(ValidateRequestId(request.request_id()));
  switch (request.prompt_case()) {
    case v1::GenerateRequest::kText:
      if (request.text().empty()) return absl::InvalidArgumentError("text must not be empty");
      TPSERVE_RETURN_IF_ERROR(ValidateUtf8Field(request.text(), "text"));
      TPSERVE_RETURN_IF_ERROR(RequireTokenizer(limits, "a text prompt"));
      break;
    case v1::GenerateRequest::kTokenIds: {
      const auto& ids = request.token_ids().ids();
      if (ids.empty()) return absl::InvalidArgumentError("token_ids.ids must not be empty");
      TPSERVE_RETURN_IF_ERROR(ValidateTokenIds(ids, limits.vocab_size, "token_ids.ids"));
      break;
    }
    default:
      return absl::InvalidArgumentError("prompt: set exactly one of text or token_ids");
  }
  TPSERVE_RETURN_IF_ERROR(ValidateSampling(request.sampling(), limits));
  if (request.has_token_ids()) {
    const auto& s = request.sampling();
    return ValidatePromptLength(request.token_ids().ids_size(),
                                s.has_max_tokens() ? std::optional<int>(s.max_tokens())
                                                   : std::nullopt,
                                limits.max_context);
  }
  return absl::OkStatus();
}

absl::Status ValidatePromptLength(int prompt_tokens, std::optional<int> max_tokens,
                                  int max_context, absl::string_view limit_name) {
  if (max_tokens.has_value() && int64_t{prompt_tokens} + *max_tokens > max_context) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt (", prompt_tokens, " tokens) + sampling.max_tokens (", *max_tokens,
        ") must be <= ", limit_name, " (", max_context, ")"));
  }
  if (prompt_tokens >= max_context) {
    return absl::InvalidArgumentError(absl::StrCat("prompt (", prompt_tokens, " tokens) must be < ",
                                                   limit_name, " (", max_context,
                                                   ") to leave room for a token"));
  }
  return absl::OkStatus();
}

absl::Status ValidateTokenIds(absl::Span<const int32_t> ids, int vocab_size,
                              absl::string_view field) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(field, "[", i, "] must be in [0, ",
                                                     vocab_size, "), got ", ids[i]));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateUtf8Field(absl::string_view text, absl::string_view field) {
  if (absl::Status s = ValidateUtf8(std::string_view(text.data(), text.size())); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(field, " must be valid UTF-8: ", s.message()));
  }
  return absl::OkStatus();
}

absl::Status RequireTokenizer(const RequestLimits& limits, absl::string_view what) {
  if (limits.has_tokenizer) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      what, " needs a tokenizer, and the model directory has no tokenizer.json; "
            "send token_ids instead"));
}

}  // namespace tpserve
