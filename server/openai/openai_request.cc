#include "server/openai/openai_request.h"

#include <cstdint>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "base/status_macros.h"
#include "server/openai/openai_error.h"
#include "server/openai/request_fields.h"
#include "server/request_validation.h"
#include "tpserve/v1/sampling_limits.h"

namespace tpserve {
namespace {

// A prompt given as token ids: integers in int32's range (the core checks the vocabulary).
absl::StatusOr<v1::TokenIds> ReadIds(const OrderedJson& ids, const std::string& param) {
  v1::TokenIds out;
  if (ids.empty()) return ParamError(param, absl::StrCat(param, " must not be empty"));
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!ids[i].is_number_integer()) {
      return ExpectedParam(absl::StrCat(param, "[", i, "]"), "an integer", ids[i]);
    }
    const int64_t id = ids[i].get<int64_t>();
    if (id < 0 || id > INT32_MAX) {
      return ParamError(param, absl::StrCat(param, "[", i, "] must be a token id, got ", id));
    }
    out.add_ids(static_cast<int32_t>(id));
  }
  return out;
}

// A message's content as the template takes it: a string, null, or text parts joined
// with "\n" (as vLLM does for templates that take strings).

}  // namespace

absl::StatusOr<OrderedJson> ParseRequestBody(absl::string_view body) {
  // The callback sees each value as it starts: one nested too deep is dropped (and the
  // request refused) rather than built.
  bool too_deep = false;
  const OrderedJson::parser_callback_t limit = [&](int depth, OrderedJson::parse_event_t event,
                                                   OrderedJson&) {
    if ((event == OrderedJson::parse_event_t::object_start ||
         event == OrderedJson::parse_event_t::array_start) &&
        depth >= kMaxJsonDepth) {
      too_deep = true;
      return false;
    }
    return true;
  };
  OrderedJson parsed = OrderedJson::parse(body.begin(), body.end(), limit, false);
  if (too_deep) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request body nests deeper than ", kMaxJsonDepth, " levels"));
  }
  if (parsed.is_discarded()) {
    return absl::InvalidArgumentError("the request body is not valid JSON");
  }
  if (!parsed.is_object()) {
    return absl::InvalidArgumentError("the request body must be a JSON object");
  }
  return parsed;
}

absl::StatusOr<CompletionRequest> ReadCompletionRequest(const OrderedJson& body,
                                                        absl::string_view served_model) {
  CompletionRequest out;
  TPSERVE_RETURN_IF_ERROR(ReadCommon(body, served_model, &out.common));
  TPSERVE_RETURN_IF_ERROR(RefuseUnsupported(body));
  TPSERVE_ASSIGN_OR_RETURN(std::optional<std::string> suffix, OptString(body, "suffix"));
  if (!suffix.value_or("").empty()) {
    return ParamError("suffix", "suffix is not supported by this server");
  }
  v1::GenerateRequest shared;
  // OpenAI's (and vLLM's) default for completions.
  constexpr int kDefaultMaxTokens = 16;
  TPSERVE_RETURN_IF_ERROR(ReadSampling(body, kDefaultMaxTokens, false, &shared));
  out.n = shared.sampling().has_n() ? shared.sampling().n() : 1;
  TPSERVE_ASSIGN_OR_RETURN(std::optional<int> best_of, OptIntIn(body, "best_of", 1, kMaxCompletions));
  if (best_of.has_value() && *best_of != out.n) {
    return ParamError("best_of", "best_of other than n is not supported by this server");
  }
  TPSERVE_ASSIGN_OR_RETURN(std::optional<int> logprobs,
                           OptIntIn(body, "logprobs", 0, kMaxLogprobs));
  if (logprobs.has_value()) {
    out.logprobs = *logprobs;
    shared.mutable_sampling()->set_logprobs(*logprobs);
  }
  TPSERVE_ASSIGN_OR_RETURN(std::optional<bool> echo, OptBool(body, "echo"));
  out.echo = echo.value_or(false);
  if (out.echo && out.logprobs >= 0) {
    // Echo's logprobs would be the prompt's: its positions have them only with
    // prompt_logprobs, whose format differs.
    return ParamError("echo", "echo together with logprobs is not supported by this server");
  }
  TPSERVE_ASSIGN_OR_RETURN(std::optional<bool> add_special, OptBool(body, "add_special_tokens"));
  if (add_special.has_value()) shared.set_add_special_tokens(*add_special);
  shared.set_request_id(out.common.request_id);

  const OrderedJson& prompt = Member(body, "prompt");
  const auto add_text = [&](const OrderedJson& text) {
    v1::GenerateRequest r = shared;
    r.set_text(text.get<std::string>());
    out.prompts.push_back(std::move(r));
  };
  if (prompt.is_string()) {
    add_text(prompt);
  } else if (prompt.is_array() && !prompt.empty() && prompt[0].is_number_integer()) {
    v1::GenerateRequest r = shared;
    TPSERVE_ASSIGN_OR_RETURN(*r.mutable_token_ids(), ReadIds(prompt, "prompt"));
    out.prompts.push_back(std::move(r));
  } else if (prompt.is_array() && !prompt.empty()) {
    for (size_t i = 0; i < prompt.size(); ++i) {
      const std::string param = absl::StrCat("prompt[", i, "]");
      if (prompt[i].is_string()) {
        add_text(prompt[i]);
      } else if (prompt[i].is_array()) {
        v1::GenerateRequest r = shared;
        TPSERVE_ASSIGN_OR_RETURN(*r.mutable_token_ids(), ReadIds(prompt[i], param));
        out.prompts.push_back(std::move(r));
      } else {
        return ExpectedParam(param, "a string or an array of token ids", prompt[i]);
      }
    }
  } else if (prompt.is_array()) {
    return ParamError("prompt", "prompt must not be empty");
  } else {
    return ExpectedParam("prompt", "a string, an array of strings or token ids", prompt);
  }
  constexpr size_t kMaxPrompts = 64;
  if (out.prompts.size() * out.n > kMaxPrompts) {
    return ParamError("prompt", absl::StrCat("prompt has ", out.prompts.size(), " prompts × n ",
                                             out.n, " choices; at most ", kMaxPrompts,
                                             " choices per request"));
  }
  for (const v1::GenerateRequest& r : out.prompts) {
    if (r.has_text() && r.text().empty()) return ParamError("prompt", "prompt must not be empty");
  }
  return out;
}

absl::Status RewriteCoreError(const absl::Status& status, bool chat) {
  if (status.ok() || !ErrorParam(status).empty()) return status;
  std::string message(status.message());
  std::string param;
  const std::string prompt_name = chat ? "messages" : "prompt";
  if (absl::StartsWith(message, "sampling.")) {
    size_t end = message.find_first_of(" [", 9);
    if (end == std::string::npos) end = message.size();
    param = message.substr(9, end - 9);
    if (chat && param == "logprobs") param = "top_logprobs";
    message = param + message.substr(end);
  } else if (absl::StartsWith(message, "token_ids.ids")) {
    param = "prompt";
    message = "prompt" + message.substr(13);
  } else if (absl::StartsWith(message, "text ")) {
    param = prompt_name;
    message = prompt_name + message.substr(4);
  } else if (absl::StartsWith(message, "prompt (")) {
    param = absl::StrContains(message, "max_tokens") ? "max_tokens" : prompt_name;
    absl::StrReplaceAll({{"sampling.max_tokens", "max_tokens"}}, &message);
  } else if (absl::StartsWith(message, "request_id")) {
    param = "request_id";
  }
  if (param.empty()) return status;
  absl::Status out(status.code(), message);
  return WithParam(out, param);
}

}  // namespace tpserve
