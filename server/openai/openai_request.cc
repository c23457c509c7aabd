#include "server/openai/openai_request.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "base/status_macros.h"
#include "server/openai/openai_error.h"
#include "server/request_validation.h"
#include "tpserve/v1/sampling_limits.h"

namespace tpserve {
namespace {

std::string TypeName(const OrderedJson& v) {
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

absl::Status Expected(absl::string_view param, absl::string_view what, const OrderedJson& got) {
  return ParamError(param, absl::StrCat(param, " must be ", what, ", got ", TypeName(got)));
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
  if (!v.is_boolean()) return Expected(key, "a boolean", v);
  return std::optional<bool>(v.get<bool>());
}

absl::StatusOr<std::optional<double>> OptNumber(const OrderedJson& body, const std::string& key) {
  const OrderedJson& v = Member(body, key);
  if (v.is_null()) return std::optional<double>();
  if (!v.is_number()) return Expected(key, "a number", v);
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
  return Expected(key, "an integer", v);
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
  if (!v.is_string()) return Expected(key, "a string", v);
  return std::optional<std::string>(v.get<std::string>());
}

// A float parameter in [low, high] (inclusive unless `low_open`).
absl::StatusOr<std::optional<float>> OptFloatIn(const OrderedJson& body, const std::string& key,
                                                double low, double high, bool low_open = false) {
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
    if (!format.is_object()) return Expected("response_format", "an object", format);
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
    if (!options.is_object()) return Expected("stream_options", "an object", options);
    if (!common->stream) {
      return ParamError("stream_options", "stream_options is only allowed with stream: true");
    }
    const OrderedJson& usage = Member(options, "include_usage");
    if (!usage.is_null() && !usage.is_boolean()) {
      return Expected("stream_options.include_usage", "a boolean", usage);
    }
    common->include_usage = usage.is_boolean() && usage.get<bool>();
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
      if (!stop[i].is_string()) return Expected(absl::StrCat("stop[", i, "]"), "a string", stop[i]);
      s->add_stop(stop[i].get<std::string>());
    }
  } else if (!stop.is_null()) {
    return Expected("stop", "a string or an array of strings", stop);
  }
  const OrderedJson& stop_ids = Member(body, "stop_token_ids");
  if (stop_ids.is_array()) {
    for (size_t i = 0; i < stop_ids.size(); ++i) {
      const std::string param = absl::StrCat("stop_token_ids[", i, "]");
      if (!stop_ids[i].is_number_integer()) return Expected(param, "an integer", stop_ids[i]);
      const int64_t id = stop_ids[i].get<int64_t>();
      if (id < 0 || id > INT32_MAX) {
        return ParamError(param, absl::StrCat(param, " must be a token id, got ", id));
      }
      s->add_stop_token_ids(static_cast<int32_t>(id));
    }
  } else if (!stop_ids.is_null()) {
    return Expected("stop_token_ids", "an array of integers", stop_ids);
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

// A prompt given as token ids: integers in int32's range (the core checks the vocabulary).
absl::StatusOr<v1::TokenIds> ReadIds(const OrderedJson& ids, const std::string& param) {
  v1::TokenIds out;
  if (ids.empty()) return ParamError(param, absl::StrCat(param, " must not be empty"));
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!ids[i].is_number_integer()) {
      return Expected(absl::StrCat(param, "[", i, "]"), "an integer", ids[i]);
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
absl::StatusOr<OrderedJson> MessageText(const OrderedJson& content, const std::string& param) {
  if (content.is_null() || content.is_string()) return content;
  if (!content.is_array()) return Expected(param, "a string, an array of parts or null", content);
  std::vector<std::string> texts;
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string part_param = absl::StrCat(param, "[", i, "]");
    const OrderedJson& part = content[i];
    if (!part.is_object()) return Expected(part_param, "an object", part);
    const OrderedJson& type = Member(part, "type");
    if (!type.is_string()) return Expected(absl::StrCat(part_param, ".type"), "a string", type);
    const std::string kind = type.get<std::string>();
    if (kind != "text" && kind != "input_text") {
      return ParamError(part_param, absl::StrCat(part_param, ": content parts of type \"", kind,
                                                 "\" are not supported (text only)"));
    }
    const OrderedJson& text = Member(part, "text");
    if (!text.is_string()) return Expected(absl::StrCat(part_param, ".text"), "a string", text);
    texts.push_back(text.get<std::string>());
  }
  return OrderedJson(absl::StrJoin(texts, "\n"));
}

absl::StatusOr<OrderedJson> ReadToolCalls(const OrderedJson& calls, const std::string& param) {
  if (!calls.is_array()) return Expected(param, "an array", calls);
  OrderedJson out = OrderedJson::array();
  for (size_t j = 0; j < calls.size(); ++j) {
    const std::string call_param = absl::StrCat(param, "[", j, "]");
    const OrderedJson& call = calls[j];
    if (!call.is_object()) return Expected(call_param, "an object", call);
    OrderedJson copy = call;
    const OrderedJson& function = Member(call, "function");
    if (!function.is_object()) {
      return Expected(absl::StrCat(call_param, ".function"), "an object", function);
    }
    const OrderedJson& name = Member(function, "name");
    if (!name.is_string()) {
      return Expected(absl::StrCat(call_param, ".function.name"), "a string", name);
    }
    // Templates take the arguments as a mapping (they tojson or iterate it); OpenAI sends
    // them as JSON text.
    const OrderedJson& arguments = Member(function, "arguments");
    if (arguments.is_string()) {
      OrderedJson parsed = OrderedJson::parse(arguments.get<std::string>(), nullptr, false);
      if (parsed.is_discarded()) {
        return ParamError(absl::StrCat(call_param, ".function.arguments"),
                          absl::StrCat(call_param, ".function.arguments must be JSON text"));
      }
      copy["function"]["arguments"] = std::move(parsed);
    } else if (!arguments.is_object() && !arguments.is_null()) {
      return Expected(absl::StrCat(call_param, ".function.arguments"), "a JSON string or an object",
                      arguments);
    }
    out.push_back(std::move(copy));
  }
  return out;
}

absl::StatusOr<OrderedJson> ReadMessages(const OrderedJson& body) {
  const OrderedJson& messages = Member(body, "messages");
  if (!messages.is_array()) return Expected("messages", "an array", messages);
  if (messages.empty()) return ParamError("messages", "messages must not be empty");
  OrderedJson out = OrderedJson::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string param = absl::StrCat("messages[", i, "]");
    const OrderedJson& message = messages[i];
    if (!message.is_object()) return Expected(param, "an object", message);
    const OrderedJson& role = Member(message, "role");
    if (!role.is_string()) return Expected(param + ".role", "a string", role);
    const std::string r = role.get<std::string>();
    if (r != "system" && r != "developer" && r != "user" && r != "assistant" && r != "tool") {
      return ParamError(param + ".role",
                        absl::StrCat(param, ".role must be one of system, developer, user, "
                                            "assistant, tool; got \"", r, "\""));
    }
    OrderedJson copy = message;
    TPSERVE_ASSIGN_OR_RETURN(copy["content"],
                             MessageText(Member(message, "content"), param + ".content"));
    if (message.contains("tool_calls") && !message["tool_calls"].is_null()) {
      TPSERVE_ASSIGN_OR_RETURN(copy["tool_calls"],
                               ReadToolCalls(message["tool_calls"], param + ".tool_calls"));
    }
    for (const char* key : {"name", "tool_call_id", "reasoning_content"}) {
      const OrderedJson& v = Member(message, key);
      if (!v.is_null() && !v.is_string()) {
        return Expected(absl::StrCat(param, ".", key), "a string", v);
      }
    }
    out.push_back(std::move(copy));
  }
  return out;
}

absl::Status ReadTools(const OrderedJson& body, ChatRequest* request) {
  const OrderedJson& tools = Member(body, "tools");
  std::vector<std::string> names;
  if (!tools.is_null()) {
    if (!tools.is_array()) return Expected("tools", "an array", tools);
    for (size_t i = 0; i < tools.size(); ++i) {
      const std::string param = absl::StrCat("tools[", i, "]");
      const OrderedJson& tool = tools[i];
      if (!tool.is_object()) return Expected(param, "an object", tool);
      const OrderedJson& type = Member(tool, "type");
      if (!type.is_string() || type.get<std::string>() != "function") {
        return ParamError(param + ".type", param + ".type must be \"function\"");
      }
      const OrderedJson& function = Member(tool, "function");
      if (!function.is_object()) return Expected(param + ".function", "an object", function);
      const OrderedJson& name = Member(function, "name");
      if (!name.is_string() || name.get<std::string>().empty()) {
        return ParamError(param + ".function.name", param + ".function.name must be a non-empty string");
      }
      const OrderedJson& parameters = Member(function, "parameters");
      if (!parameters.is_null() && !parameters.is_object()) {
        return Expected(param + ".function.parameters", "an object", parameters);
      }
      names.push_back(name.get<std::string>());
    }
    if (!tools.empty()) request->tools = tools;
  }
  const bool have_tools = !names.empty();
  const OrderedJson& choice = Member(body, "tool_choice");
  request->tool_choice = have_tools ? ToolChoice::kAuto : ToolChoice::kNone;
  if (choice.is_string()) {
    const std::string c = choice.get<std::string>();
    if (c == "none") {
      request->tool_choice = ToolChoice::kNone;
    } else if (c == "auto" || c == "required") {
      if (!have_tools) {
        return ParamError("tool_choice", absl::StrCat("tool_choice \"", c, "\" needs tools"));
      }
      request->tool_choice = c == "auto" ? ToolChoice::kAuto : ToolChoice::kRequired;
    } else {
      return ParamError("tool_choice", absl::StrCat("tool_choice must be \"none\", \"auto\", "
                                                    "\"required\" or a named function; got \"",
                                                    c, "\""));
    }
  } else if (choice.is_object()) {
    const OrderedJson& function = Member(choice, "function");
    const OrderedJson& name = function.is_object() ? Member(function, "name") : function;
    if (!name.is_string()) return Expected("tool_choice.function.name", "a string", name);
    request->named_tool = name.get<std::string>();
    bool found = false;
    for (const std::string& n : names) found = found || n == request->named_tool;
    if (!found) {
      return ParamError("tool_choice", absl::StrCat("tool_choice names function \"",
                                                    request->named_tool,
                                                    "\", which is not among the tools"));
    }
    request->tool_choice = ToolChoice::kNamed;
  } else if (!choice.is_null()) {
    return Expected("tool_choice", "a string or an object", choice);
  }
  TPSERVE_ASSIGN_OR_RETURN(std::optional<bool> parallel, OptBool(body, "parallel_tool_calls"));
  (void)parallel;  // accepted; every call the model makes is returned
  return absl::OkStatus();
}

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
        return Expected(param, "a string or an array of token ids", prompt[i]);
      }
    }
  } else if (prompt.is_array()) {
    return ParamError("prompt", "prompt must not be empty");
  } else {
    return Expected("prompt", "a string, an array of strings or token ids", prompt);
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

absl::StatusOr<ChatRequest> ReadChatRequest(const OrderedJson& body,
                                            absl::string_view served_model) {
  ChatRequest out;
  TPSERVE_RETURN_IF_ERROR(ReadCommon(body, served_model, &out.common));
  TPSERVE_RETURN_IF_ERROR(RefuseUnsupported(body));
  if (!Member(body, "chat_template").is_null()) {
    return ParamError("chat_template",
                      "chat_template: a request cannot bring its own template; the server "
                      "renders the model's (or --chat-template)");
  }
  TPSERVE_RETURN_IF_ERROR(ReadSampling(body, 0, true, &out.generate));
  TPSERVE_ASSIGN_OR_RETURN(std::optional<bool> logprobs, OptBool(body, "logprobs"));
  out.logprobs = logprobs.value_or(false);
  TPSERVE_ASSIGN_OR_RETURN(std::optional<int> top, OptIntIn(body, "top_logprobs", 0, kMaxLogprobs));
  if (top.has_value() && !out.logprobs) {
    return ParamError("top_logprobs", "top_logprobs needs logprobs: true");
  }
  out.top_logprobs = top.value_or(0);
  if (out.logprobs) out.generate.mutable_sampling()->set_logprobs(out.top_logprobs);
  // The template adds the special tokens it wants (vLLM's default for chat).
  TPSERVE_ASSIGN_OR_RETURN(std::optional<bool> add_special, OptBool(body, "add_special_tokens"));
  out.generate.set_add_special_tokens(add_special.value_or(false));
  out.generate.set_request_id(out.common.request_id);

  TPSERVE_ASSIGN_OR_RETURN(out.messages, ReadMessages(body));
  TPSERVE_RETURN_IF_ERROR(ReadTools(body, &out));
  const OrderedJson& documents = Member(body, "documents");
  if (!documents.is_null()) {
    if (!documents.is_array()) return Expected("documents", "an array of objects", documents);
    for (size_t i = 0; i < documents.size(); ++i) {
      if (!documents[i].is_object()) {
        return Expected(absl::StrCat("documents[", i, "]"), "an object", documents[i]);
      }
    }
    out.documents = documents;
  }
  const OrderedJson& kwargs = Member(body, "chat_template_kwargs");
  if (!kwargs.is_null()) {
    if (!kwargs.is_object()) return Expected("chat_template_kwargs", "an object", kwargs);
    out.template_kwargs = kwargs;
  }
  TPSERVE_ASSIGN_OR_RETURN(std::optional<bool> add_prompt, OptBool(body, "add_generation_prompt"));
  TPSERVE_ASSIGN_OR_RETURN(std::optional<bool> continue_final,
                           OptBool(body, "continue_final_message"));
  out.continue_final_message = continue_final.value_or(false);
  out.add_generation_prompt = add_prompt.value_or(!out.continue_final_message);
  if (out.add_generation_prompt && out.continue_final_message) {
    return ParamError("continue_final_message",
                      "continue_final_message and add_generation_prompt cannot both be true");
  }
  if (out.continue_final_message &&
      Member(out.messages.back(), "role").get<std::string>() != "assistant") {
    return ParamError("continue_final_message",
                      "continue_final_message needs the last message to be the assistant's");
  }
  return out;
}

absl::StatusOr<PreparedChat> PrepareChat(ChatRequest request, const ChatConfig& config) {
  if (config.chat_template == nullptr) {
    return ParamError("messages",
                      "this model has no chat template; start tpserve with --chat-template "
                      "FILE, or send a prompt to /v1/completions (Generate on gRPC)");
  }
  PreparedChat out;
  out.parsing.reasoning_parser = config.reasoning_parser;
  out.parsing.tool_call_ids = config.tool_call_ids;
  if (request.tool_choice != ToolChoice::kNone) {
    if (config.tool_call_parser.empty()) {
      return ParamError("tool_choice",
                        "tool calls need the server started with --tool-call-parser (e.g. "
                        "hermes, llama3_json); or send tool_choice \"none\"");
    }
    out.parsing.tool_parser = config.tool_call_parser;
  }
  ChatTemplateInputs inputs;
  inputs.messages = std::move(request.messages);
  inputs.tools = std::move(request.tools);
  inputs.documents = std::move(request.documents);
  inputs.add_generation_prompt = request.add_generation_prompt;
  inputs.continue_final_message = request.continue_final_message;
  inputs.kwargs = std::move(request.template_kwargs);
  absl::StatusOr<std::string> prompt = config.chat_template->Render(inputs);
  if (!prompt.ok()) {
    return ParamError("messages", absl::StrCat("the chat template failed on these messages: ",
                                               prompt.status().message()));
  }
  out.parsing.prompt_opened_thinking = PromptOpensThinking(*prompt);
  if (request.tool_choice == ToolChoice::kRequired || request.tool_choice == ToolChoice::kNamed) {
    // No constrained decoding: the answer is started as a call, and the model goes on.
    out.parsing.forced_tool_prefix = ForcedToolCallPrefix(
        config.tool_call_parser,
        request.tool_choice == ToolChoice::kNamed ? &request.named_tool : nullptr);
    *prompt += out.parsing.forced_tool_prefix;
  }
  out.generate = std::move(request.generate);
  out.generate.set_text(*std::move(prompt));
  out.choices = out.generate.sampling().has_n() ? out.generate.sampling().n() : 1;
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
