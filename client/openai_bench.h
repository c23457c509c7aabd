// The OpenAI backend of tpserve-cli bench (--backend openai): each request a streamed
// POST /v1/completions on the HTTP API of tpserve --http-port (server/openai/openai_api.h),
// the prompt as token ids with ignore_eos and return_token_ids, and the usage in the
// last event. It is timed by RequestClock as the gRPC backend times Generate: each
// event's choices' token_ids count as a Generate chunk's token_ids do.
//
// Each request opens its own plain-HTTP connection (no TLS) and reads the Server-Sent
// Events as they arrive. It fails, with this code in the report's failures, when the
// answer is not 200 ("HTTP 404"), no connection can be made ("CONNECT_FAILED") or it
// breaks ("CONNECTION_ERROR"), the answer is not HTTP ("BAD_RESPONSE"), the call passes
// its deadline ("TIMEOUT"), the stream carries an error event ("STREAM_ERROR") or one
// that is not JSON ("BAD_EVENT"), or it ends before `data: [DONE]` ("INCOMPLETE_STREAM").
//
// Threading: a timer's calls run on many threads at once, each blocking on its own
// connection; SseSplitter and CompletionStream belong to one request's thread.
#ifndef TPSERVE_CLIENT_OPENAI_BENCH_H_
#define TPSERVE_CLIENT_OPENAI_BENCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/bench.h"

namespace tpserve {

// A parsed --openai-url, "http://HOST[:PORT][/PATH]" (the OpenAI clients' base URL).
struct OpenAiUrl {
  std::string host;  // without an IPv6 literal's brackets: "127.0.0.1", "::1"
  std::string port;  // "80" when the URL has none
  std::string completions_path;  // PATH + "/completions"; "/v1/completions" without PATH
};

// InvalidArgument naming --openai-url for anything else (https:// included).
absl::StatusOr<OpenAiUrl> ParseOpenAiUrl(absl::string_view url);

// One benchmark request's JSON body; `model` "" leaves "model" out (the served one).
std::string CompletionBody(const BenchPrompt& prompt, const BenchOptions& options,
                           const std::string& model);

// Splits a text/event-stream into its events' data, however its bytes are split across
// reads. Lines end in LF or CRLF; an event's "data:" values (one leading space dropped)
// join with LF; comments, other fields and events without data are skipped.
class SseSplitter {
 public:
  // The data of each event that `bytes` complete, in order.
  std::vector<std::string> Feed(absl::string_view bytes);

 private:
  void Line(absl::string_view line, std::vector<std::string>* events);

  std::string partial_line_;
  std::string data_;  // the current event's, so far
  bool has_data_ = false;
};

// Reads one /v1/completions event stream into a RequestTiming as its bytes arrive:
// tokens through `clock`, the usage event's prompt_tokens_details.cached_tokens.
class CompletionStream {
 public:
  explicit CompletionStream(RequestClock* clock) : clock_(clock) {}
  void Feed(absl::string_view bytes, RequestTiming* timing);
  // "" once the stream has ended as it should (`[DONE]`, no error event before it, and
  // the token ids counted agree with the server's usage.completion_tokens when it sent
  // one), else the failure's code: a server that sends no token ids (not asked-for
  // `return_token_ids`) would otherwise be timed as producing nothing, successfully.
  std::string ErrorCode() const;

 private:
  void Event(const std::string& data, RequestTiming* timing);

  RequestClock* const clock_;
  SseSplitter sse_;
  bool done_ = false;
  std::string error_code_;  // the first bad or error event's
  int64_t counted_tokens_ = 0;
  int64_t usage_tokens_ = -1;  // usage.completion_tokens; -1: not sent
};

// The OpenAI backend on options.openai_url, sending options.api_key; each call ends by
// `timeout` after it began. Resolves the URL's host once, here: an error names the URL.
absl::StatusOr<RequestTimer> OpenAiTimer(const BenchOptions& options, const std::string& model,
                                         absl::Duration timeout);

}  // namespace tpserve

#endif  // TPSERVE_CLIENT_OPENAI_BENCH_H_
