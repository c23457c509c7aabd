// The request fields of the OpenAI-compatible API that both endpoints read, and the
// typed reads behind them: each error is INVALID_ARGUMENT carrying the parameter
// (openai_error.h), worded "<param> must be <what>, got <JSON type>". A missing member
// and null both read as unset. Pure; any thread.
#ifndef TPSERVE_SERVER_OPENAI_REQUEST_FIELDS_H_
#define TPSERVE_SERVER_OPENAI_REQUEST_FIELDS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/openai/openai_request.h"
#include "tpserve/v1/inference.pb.h"

namespace tpserve {

// The JSON type of `v` in words, for errors.
std::string ParamTypeName(const OrderedJson& v);
// "<param> must be <what>, got <type of got>", about `param`.
absl::Status ExpectedParam(absl::string_view param, absl::string_view what, const OrderedJson& got);
// The member `key` of `body`, or null when it is missing.
const OrderedJson& Member(const OrderedJson& body, const std::string& key);

absl::StatusOr<std::optional<bool>> OptBool(const OrderedJson& body, const std::string& key);
absl::StatusOr<std::optional<double>> OptNumber(const OrderedJson& body, const std::string& key);
// An integer (2.0 counts, as OpenAI's validation takes it) within int64.
absl::StatusOr<std::optional<int64_t>> OptInt(const OrderedJson& body, const std::string& key);
absl::StatusOr<std::optional<int>> OptIntIn(const OrderedJson& body, const std::string& key,
                                            int64_t low, int64_t high);
absl::StatusOr<std::optional<std::string>> OptString(const OrderedJson& body,
                                                     const std::string& key);
// A float parameter in [low, high] (inclusive unless `low_open`).
absl::StatusOr<std::optional<float>> OptFloatIn(const OrderedJson& body, const std::string& key,
                                                double low, double high, bool low_open = false);

// Fields known to OpenAI or vLLM that this server does not honour, refused by name.
absl::Status RefuseUnsupported(const OrderedJson& body);
// model (NOT_FOUND unless empty or `served`), stream, stream_options, user, request_id,
// return_token_ids.
absl::Status ReadCommon(const OrderedJson& body, absl::string_view served, OpenAiCommon* common);
// The sampling fields both endpoints take, into `request`; `max_tokens_default` when
// neither max_tokens nor (chat) max_completion_tokens is set (0: unset, the rest of the
// context).
absl::Status ReadSampling(const OrderedJson& body, int max_tokens_default, bool chat,
                          v1::GenerateRequest* request);

}  // namespace tpserve

#endif  // TPSERVE_SERVER_OPENAI_REQUEST_FIELDS_H_
