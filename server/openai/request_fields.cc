#include "server/openai/request_fields.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "server/openai/openai_error.h"
#include "server/request_validation.h"
#include "tpserve/v1/sampling_limits.h"

namespace tpserve {

std::string ParamTypeName(const OrderedJson& v) {
  switch (v.type()) {
    case OrderedJson::value_t::null:
      return "null";
    case OrderedJson::value_t::boolean:
      return "boolean";
    case OrderedJson::value_t::string:
      return "string";
    case OrderedJson::value_t::array:
      return "array";
    case OrderedJson::value_t::object:
      return "object";
    case OrderedJson::value_t::number_float:
      return "number";
    default:
      return "integer";
  }
}

absl::Status ExpectedParam(absl::string_view param, absl::string_view what, const OrderedJson& got) {
  return ParamError(param, absl::StrCat(param, " must be ", what, ", got ", ParamTypeName(got)));
}

// The member `key` of `body`, or null when it is missing.
const OrderedJson& Member(const OrderedJson& body, const std::string& key) {
  static const OrderedJson* const kNull = new OrderedJson();
  auto it = body.find(key);
  return it == body.end() ? *kNull : *it;
}

absl::StatusOr<std::optional<bool>> OptBool(const OrderedJson& body, const std::string& key) {
  const OrderedJson& v = Member(body, key);
  if (v.is_null()) return std::optional<bool>();
  if (!v.is_boolean()) return ExpectedParam(key, "a boolean", v);
  return std::optional<bool>(v.get<bool>());
}

absl::StatusOr<std::optional<double>> OptNumber(const OrderedJson& body, const std::string& key) {
  const OrderedJson& v = Member(body, key);
  if (v.is_null()) return std::optional<double>();
  if (!v.is_number()) return ExpectedParam(key, "a number", v);
  return std::optional<double>(v.get<double>());
}

// An integer (2.0 counts, as OpenAI's validation takes it) within int64.
absl::StatusOr<std::optional<int64_t>> OptInt(const OrderedJson& body, const std::string& key) {
  const OrderedJson& v = Member(body, key);
  if (v.is_null()) return std::optional<int64_t>();
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX}) {
      return ParamError(key, absl::StrCat(key, " is out of range"));
    }
    return std::optional<int64_t>(v.get<int64_t>());
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e18) {
      return std::optional<int64_t>(static_cast<int64_t>(d));
    }
  }
  return ExpectedParam(key, "an integer", v);
}

absl::StatusOr<std::optional<int>> OptIntIn(const OrderedJson& body, const std::string& key,
                                            int64_t low, int64_t high) {
  TPSERVE_ASSIGN_OR_RETURN(std::optional<int64_t> v, OptInt(body, key));
  if (!v.has_value()) return std::optional<int>();
  if (*v < low || *v > high) {
    return ParamError(key, absl::StrCat(key, " must be an integer in [", low, ", ", high,
                                        "], got ", *v));
  }
  return std::optional<int>(static_cast<int>(*v));
}

absl::StatusOr<std::optional<std::string>> OptString(const OrderedJson& body,
                                                     const std::string& key) {
  const OrderedJson& v = Member(body, key);
  if (v.is_null()) return std::optional<std::string>();
  if (!v.is_string()) return ExpectedParam(key, "a string", v);
  return std::optional<std::string>(v.get<std::string>());
}

// A float parameter in [low, high] (inclusive unless `low_open`).
absl::StatusOr<std::optional<float>> OptFloatIn(const OrderedJson& body, const std::string& key,
                                                double low, double high, bool low_open) {
  TPSERVE_ASSIGN_OR_RETURN(std::optional<double> v, OptNumber(body, key));
  if (!v.has_value()) return std::optional<float>();
  if (!std::isfinite(*v) || (low_open ? *v <= low : *v < low) || *v > high) {
    return ParamError(key, absl::StrCat(key, " must be in ", low_open ? "(" : "[", low, ", ", high,
                                        "], got ", *v));
  }
  return std::optional<float>(static_cast<float>(*v));
}

absl::Status RefuseUnsupported(const OrderedJson& body) {
  // Known to OpenAI or vLLM, but not served: refused by name rather than ignored.
  const OrderedJson& bias = Member(body, "logit_bias");
  if (!bias.is_null() && !(bias.is_object() && bias.empty())) {
    return ParamError("logit_bias", "logit_bias is not supported by this server");
  }
  const OrderedJson& format = Member(body, "response_format");
  if (!format.is_null()) {
    if (!format.is_object()) return ExpectedParam("response_format", "an object", format);
    const OrderedJson& type = Member(format, "type");
    if (!type.is_string() || type.get<std::string>() != "text") {
      return ParamError("response_format",
                        "response_format: only {\"type\": \"text\"} is supported (no "
                        "structured output on this server)");
    }
  }
  TPSERVE_ASSIGN_OR_RETURN(std::optional<int64_t> min_tokens, OptInt(body, "min_tokens"));
  if (min_tokens.value_or(0) != 0) {
    return ParamError("min_tokens", "min_tokens is not supported by this server");
  }
  TPSERVE_ASSIGN_OR_RETURN(std::optional<bool> stop_in_output,
                           OptBool(body, "include_stop_str_in_output"));
  if (stop_in_output.value_or(false)) {
    return ParamError("include_stop_str_in_output",
                      "include_stop_str_in_output is not supported by this server");
  }
  if (!Member(body, "audio").is_null()) {
    return ParamError("audio", "audio output is not supported by this server (text only)");
  }
  const OrderedJson& modalities = Member(body, "modalities");
  if (!modalities.is_null() && modalities != OrderedJson::array({"text"})) {
    return ParamError("modalities", "modalities: only [\"text\"] is supported by this server");
  }
  for (const char* legacy : {"functions", "function_call"}) {
    if (!Member(body, legacy).is_null()) {
      return ParamError(legacy, absl::StrCat(legacy, " is deprecated by OpenAI and not "
                                                     "supported; use tools and tool_choice"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckModel(const OrderedJson& body, absl::string_view served, std::string* model) {
  TPSERVE_ASSIGN_OR_RETURN(std::optional<std::string> name, OptString(body, "model"));
  *model = name.value_or("");
  if (model->empty() || *model == served) return absl::OkStatus();
  return WithParam(absl::NotFoundError(absl::StrCat("The model `", *model,
                                                    "` does not exist; this server serves `",
                                                    served, "`")),
                   "model");
}

absl::Status ReadCommon(const OrderedJson& body, absl::string_view served, OpenAiCommon* common) {
  TPSERVE_RETURN_IF_ERROR(CheckModel(body, served, &common->model));
  TPSERVE_ASSIGN_OR_RETURN(std::optional<bool> stream, OptBool(body, "stream"));
  common->stream = stream.value_or(false);
  const OrderedJson& options = Member(body, "stream_options");
  if (!options.is_null()) {
    if (!options.is_object()) return ExpectedParam("stream_options", "an object", options);
    if (!common->stream) {
      return ParamError("stream_options", "stream_options is only allowed with stream: true");
    }
    const OrderedJson& usage = Member(options, "include_usage");
    if (!usage.is_null() && !usage.is_boolean()) {
      return ExpectedParam("stream_options.include_usage", "a boolean", usage);
    }
    common->include_usage = usage.is_boolean() && usage.get<bool>();
    const OrderedJson& continuous = Member(options, "continuous_usage_stats");
    if (continuous.is_boolean() && continuous.get<bool>()) {
      return ParamError("stream_options.continuous_usage_stats",
                        "stream_options.continuous_usage_stats is not supported by this server");
    }
  }
  TPSERVE_ASSIGN_OR_RETURN(std::optional<std::string> user, OptString(body, "user"));
  common->user = user.value_or("");
  TPSERVE_ASSIGN_OR_RETURN(std::optional<bool> token_ids, OptBool(body, "return_token_ids"));
  common->return_token_ids = token_ids.value_or(false);
  TPSERVE_ASSIGN_OR_RETURN(std::optional<std::string> id, OptString(body, "request_id"));
  if (id.has_value()) {
    TPSERVE_RETURN_IF_ERROR(WithParam(ValidateRequestId(*id), "request_id"));
    common->request_id = *id;
  }
  return absl::OkStatus();
}

// The sampling fields both endpoints take, into `s`; `max_tokens_default` when neither
// max_tokens nor max_completion_tokens is set (0: unset, the rest of the context).
absl::Status ReadSampling(const OrderedJson& body, int max_tokens_default, bool chat,
                          v1::GenerateRequest* request) {
  v1::SamplingParams* s = request->mutable_sampling();
  TPSERVE_ASSIGN_OR_RETURN(std::optional<int> max_tokens,
                           OptIntIn(body, "max_tokens", 1, INT32_MAX));
  if (chat) {
    TPSERVE_ASSIGN_OR_RETURN(std::optional<int> max_completion,
                             OptIntIn(body, "max_completion_tokens", 1, INT32_MAX));
    if (max_completion.has_value()) max_tokens = max_completion;
  }
  if (max_tokens.has_value()) {
    s->set_max_tokens(*max_tokens);
  } else if (max_tokens_default > 0) {
    s->set_max_tokens(max_tokens_default);
  }
  TPSERVE_ASSIGN_OR_RETURN(std::optional<float> temperature,
                           OptFloatIn(body, "temperature", 0, 2));
  if (temperature.has_value()) s->set_temperature(*temperature);
  TPSERVE_ASSIGN_OR_RETURN(std::optional<float> top_p, OptFloatIn(body, "top_p", 0, 1, true));
  if (top_p.has_value()) s->set_top_p(*top_p);
  TPSERVE_ASSIGN_OR_RETURN(std::optional<int64_t> top_k, OptInt(body, "top_k"));
  if (top_k.has_value()) {
    if (*top_k < -1 || *top_k > INT32_MAX) {
      return ParamError("top_k", absl::StrCat("top_k must be -1 or 0 (no limit) or a positive "
                                              "integer, got ",
                                              *top_k));
    }
    s->set_top_k(static_cast<int32_t>(*top_k));
  }
  TPSERVE_ASSIGN_OR_RETURN(std::optional<float> min_p, OptFloatIn(body, "min_p", 0, 1));
  if (min_p.has_value()) s->set_min_p(*min_p);
  TPSERVE_ASSIGN_OR_RETURN(
      std::optional<float> repetition,
      OptFloatIn(body, "repetition_penalty", kMinRepetitionPenalty, kMaxRepetitionPenalty));
  if (repetition.has_value()) s->set_repetition_penalty(*repetition);
  TPSERVE_ASSIGN_OR_RETURN(std::optional<float> presence,
                           OptFloatIn(body, "presence_penalty", -2, 2));
  if (presence.has_value()) s->set_presence_penalty(*presence);
  TPSERVE_ASSIGN_OR_RETURN(std::optional<float> frequency,
                           OptFloatIn(body, "frequency_penalty", -2, 2));
  if (frequency.has_value()) s->set_frequency_penalty(*frequency);
  TPSERVE_ASSIGN_OR_RETURN(std::optional<int64_t> seed, OptInt(body, "seed"));
  // OpenAI's seed is any 64-bit integer; a negative one keeps its bits.
  if (seed.has_value()) s->set_seed(static_cast<uint64_t>(*seed));
  TPSERVE_ASSIGN_OR_RETURN(std::optional<int> n, OptIntIn(body, "n", 1, kMaxCompletions));
  if (n.has_value()) s->set_n(*n);

  const OrderedJson& stop = Member(body, "stop");
  if (stop.is_string()) {
    s->add_stop(stop.get<std::string>());
  } else if (stop.is_array()) {
    for (size_t i = 0; i < stop.size(); ++i) {
      if (!stop[i].is_string()) return ExpectedParam(absl::StrCat("stop[", i, "]"), "a string", stop[i]);
      s->add_stop(stop[i].get<std::string>());
    }
  } else if (!stop.is_null()) {
    return ExpectedParam("stop", "a string or an array of strings", stop);
  }
  const OrderedJson& stop_ids = Member(body, "stop_token_ids");
  if (stop_ids.is_array()) {
    for (size_t i = 0; i < stop_ids.size(); ++i) {
      const std::string param = absl::StrCat("stop_token_ids[", i, "]");
      if (!stop_ids[i].is_number_integer()) return ExpectedParam(param, "an integer", stop_ids[i]);
      const int64_t id = stop_ids[i].get<int64_t>();
      if (id < 0 || id > INT32_MAX) {
        return ParamError(param, absl::StrCat(param, " must be a token id, got ", id));
      }
      s->add_stop_token_ids(static_cast<int32_t>(id));
    }
  } else if (!stop_ids.is_null()) {
    return ExpectedParam("stop_token_ids", "an array of integers", stop_ids);
  }
  TPSERVE_ASSIGN_OR_RETURN(std::optional<bool> ignore_eos, OptBool(body, "ignore_eos"));
  s->set_ignore_eos(ignore_eos.value_or(false));
  TPSERVE_ASSIGN_OR_RETURN(std::optional<bool> skip_special, OptBool(body, "skip_special_tokens"));
  if (skip_special.has_value()) request->set_skip_special_tokens(*skip_special);
  TPSERVE_ASSIGN_OR_RETURN(std::optional<int> prompt_logprobs,
                           OptIntIn(body, "prompt_logprobs", 0, kMaxLogprobs));
  if (prompt_logprobs.has_value()) s->set_prompt_logprobs(*prompt_logprobs);
  return absl::OkStatus();
}

}  // namespace tpserve
