// Request validation for the gRPC edge: every rule of inference.proto that a request
// can break, checked before anything reaches the tokenizer or the engine.
//
// Each failure is INVALID_ARGUMENT whose message names the field and the limit, e.g.
// "sampling.top_p must be in (0, 1], got 1.5". A text prompt (or stop strings) with no
// tokenizer loaded is FAILED_PRECONDITION: the request is well formed, the server
// cannot serve it. (Protobuf already refuses invalid UTF-8 in string fields when
// parsing; the UTF-8 checks here guard the handlers regardless.) Pure functions; safe
// from any thread.
#ifndef TPSERVE_SERVER_REQUEST_VALIDATION_H_
#define TPSERVE_SERVER_REQUEST_VALIDATION_H_

#include <cstdint>
#include <optional>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "tpserve/v1/inference.pb.h"
#include "tpserve/v1/sampling_limits.h"

namespace tpserve {

// Limits documented in inference.proto.
inline constexpr int kMaxStopStrings = 16;
inline constexpr int kMaxStopStringBytes = 256;
inline constexpr int kMaxStopTokenIds = 64;
inline constexpr int kMaxCompletions = 16;  // SamplingParams.n

// What the served model allows.
struct RequestLimits {
  int vocab_size = 0;   // token ids must be in [0, vocab_size)
  int max_context = 0;  // prompt + completion tokens
  bool has_tokenizer = false;
};

// Everything that can be checked before tokenizing: the prompt is set and non-empty,
// text is valid UTF-8 (and a tokenizer is loaded), ids are in the vocabulary, the
// sampling parameters are in range. A token_ids prompt is also checked against the
// context (text prompts are, after tokenizing, with ValidatePromptLength).
// request_id: printable ASCII, at most this many bytes (it is echoed into log lines).
inline constexpr size_t kMaxRequestIdBytes = 128;
absl::Status ValidateRequestId(absl::string_view id);

absl::Status ValidateGenerateRequest(const v1::GenerateRequest& request,
                                     const RequestLimits& limits);

// The sampling parameters alone.
absl::Status ValidateSampling(const v1::SamplingParams& params, const RequestLimits& limits);

// Whether a prompt of `prompt_tokens` leaves room for the completion: with max_tokens
// set, prompt + max_tokens ≤ max_context; unset, at least one token. `limit_name` names
// max_context in the message.
absl::Status ValidatePromptLength(int prompt_tokens, std::optional<int> max_tokens,
                                  int max_context, absl::string_view limit_name = "max_context");

// Every id in [0, vocab_size); `field` names the list in the message.
absl::Status ValidateTokenIds(absl::Span<const int32_t> ids, int vocab_size,
                              absl::string_view field);

// Valid UTF-8; `field` names the string in the message.
absl::Status ValidateUtf8Field(absl::string_view text, absl::string_view field);

// FAILED_PRECONDITION when no tokenizer is loaded; `what` says what needed it.
absl::Status RequireTokenizer(const RequestLimits& limits, absl::string_view what);

}  // namespace tpserve

#endif  // TPSERVE_SERVER_REQUEST_VALIDATION_H_
