#include "client/openai_bench.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <utility>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"

namespace tpserve {
namespace {

namespace beast = boost::beast;
namespace http = boost::beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

// Where every request of one run goes.
struct Target {
  tcp::resolver::results_type addresses;
  std::string host_header;  // "HOST:PORT"
  std::string path;
  std::string authorization;  // "Bearer KEY", or "" for none
  absl::Duration timeout;
};

// Runs one asynchronous operation on `ioc` to its end, on this thread, and returns its
// error: a blocking call that honours tcp_stream's deadline, which Asio's synchronous
// calls do not (they wait in poll() without a timeout).
template <typename Start>
beast::error_code Await(net::io_context& ioc, Start start) {
  beast::error_code result;
  start([&result](beast::error_code ec, auto&&...) { result = ec; });
  ioc.restart();
  ioc.run();
  return result;
}

std::string IoErrorCode(const beast::error_code& ec) {
  if (ec == beast::error::timeout) return "TIMEOUT";
  if (ec == http::error::end_of_stream || ec == http::error::partial_message) {
    return "CONNECTION_ERROR";  // the server closed before the answer's end
  }
  if (ec.category() == http::make_error_code(http::error::bad_version).category()) {
    return "BAD_RESPONSE";
  }
  return "CONNECTION_ERROR";
}

http::request<http::string_body> CompletionRequest(const Target& target, std::string body) {
  http::request<http::string_body> request{http::verb::post, target.path, 11};
  request.set(http::field::host, target.host_header);
  request.set(http::field::user_agent, "tpserve-cli bench");
  request.set(http::field::content_type, "application/json");
  request.set(http::field::accept, "text/event-stream");
  if (!target.authorization.empty()) request.set(http::field::authorization, target.authorization);
  request.keep_alive(false);  // one connection per request
  request.body() = std::move(body);
  request.prepare_payload();
  return request;
}

// Sends one request and reads its answer into `t`, within the target's timeout; returns
// the failure's code, or "".
std::string Exchange(const Target& target, std::string body, RequestClock& clock,
                     RequestTiming* t) {
  net::io_context ioc(1);
  beast::tcp_stream stream(ioc);
  stream.expires_after(absl::ToChronoNanoseconds(target.timeout));  // for the whole call
  beast::error_code ec =
      Await(ioc, [&](auto done) { stream.async_connect(target.addresses, std::move(done)); });
  if (ec) return ec == beast::error::timeout ? "TIMEOUT" : "CONNECT_FAILED";
  const http::request<http::string_body> request = CompletionRequest(target, std::move(body));
  ec = Await(ioc, [&](auto done) { http::async_write(stream, request, std::move(done)); });
  if (ec) return IoErrorCode(ec);

  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  // A stream is as long as its tokens make it. Not boost::none: Beast 1.74 compares a
  // Content-Length against it as an optional, and every length is more than none.
  parser.body_limit(std::numeric_limits<uint64_t>::max());
  ec = Await(ioc, [&](auto done) {
    http::async_read_header(stream, buffer, parser, std::move(done));
  });
  if (ec) return IoErrorCode(ec);
  const unsigned status = parser.get().result_int();
  if (status != 200) return absl::StrCat("HTTP ", status);

  CompletionStream events(&clock);
  char block[16 << 10];
  while (!parser.is_done()) {
    parser.get().body().data = block;
    parser.get().body().size = sizeof(block);
    ec = Await(ioc, [&](auto done) {
      http::async_read_some(stream, buffer, parser, std::move(done));
    });
    if (ec == http::error::need_buffer) ec = {};  // the block is full: hand it on
    if (ec) return IoErrorCode(ec);
    events.Feed(absl::string_view(block, sizeof(block) - parser.get().body().size), t);
  }
  return events.ErrorCode();
}

RequestTiming TimeCompletion(const Target& target, std::string body) {
  RequestTiming t;
  RequestClock clock;
  t.error_code = Exchange(target, std::move(body), clock, &t);
  clock.Finish(&t);
  t.ok = t.error_code.empty();
  return t;
}

absl::Status BadUrl(absl::string_view url, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("--openai-url \"", url, "\": ", why, " (give http://HOST:PORT)"));
}

}  // namespace

absl::StatusOr<OpenAiUrl> ParseOpenAiUrl(absl::string_view url) {
  absl::string_view rest = url;
  if (!absl::ConsumePrefix(&rest, "http://")) return BadUrl(url, "only http:// is served");
  absl::string_view authority = rest.substr(0, rest.find('/'));
  absl::string_view path = rest.substr(authority.size());
  if (path.find_first_of("?#") != absl::string_view::npos) return BadUrl(url, "a query or fragment");
  OpenAiUrl out;
  if (absl::ConsumePrefix(&authority, "[")) {  // an IPv6 literal
    const size_t close = authority.find(']');
    if (close == absl::string_view::npos) return BadUrl(url, "an unclosed [");
    out.host = std::string(authority.substr(0, close));
    authority.remove_prefix(close + 1);
    if (!authority.empty() && authority[0] != ':') return BadUrl(url, "junk after ]");
  } else {
    out.host = std::string(authority.substr(0, authority.find(':')));
    authority.remove_prefix(out.host.size());
  }
  if (out.host.empty() || out.host.find_first_of("@[] ") != std::string::npos) {
    return BadUrl(url, "no usable host");
  }
  out.port = "80";
  if (absl::ConsumePrefix(&authority, ":")) {
    int port = 0;
    if (!absl::SimpleAtoi(authority, &port) || port < 1 || port > 65535 ||
        !std::all_of(authority.begin(), authority.end(), absl::ascii_isdigit)) {
      return BadUrl(url, "the port must be in [1, 65535]");
    }
    out.port = std::string(authority);
  }
  while (absl::ConsumeSuffix(&path, "/")) {
  }
  out.completions_path = absl::StrCat(path.empty() ? "/v1" : path, "/completions");
  return out;
}

std::string CompletionBody(const BenchPrompt& prompt, const BenchOptions& o,
                           const std::string& model) {
  nlohmann::json body = {{"prompt", prompt.ids},
                         {"max_tokens", prompt.output_len},
                         {"ignore_eos", true},
                         {"temperature", o.temperature},
                         {"seed", static_cast<int64_t>(o.seed)},  // the server keeps the bits
                         {"stream", true},
                         {"stream_options", {{"include_usage", true}}},
                         {"return_token_ids", true}};
  if (!model.empty()) body["model"] = model;
  return body.dump();
}

std::vector<std::string> SseSplitter::Feed(absl::string_view bytes) {
  std::vector<std::string> events;
  for (size_t end = bytes.find('\n'); end != absl::string_view::npos; end = bytes.find('\n')) {
    partial_line_.append(bytes.data(), end);
    bytes.remove_prefix(end + 1);
    absl::string_view line = partial_line_;
    absl::ConsumeSuffix(&line, "\r");
    Line(line, &events);
    partial_line_.clear();
  }
  partial_line_.append(bytes.data(), bytes.size());
  return events;
}

void SseSplitter::Line(absl::string_view line, std::vector<std::string>* events) {
  if (line.empty()) {  // the blank line that ends an event
    if (has_data_) events->push_back(std::move(data_));
    data_.clear();
    has_data_ = false;
    return;
  }
  const size_t colon = line.find(':');
  if (line.substr(0, colon) != "data") return;  // a comment (":..."), or another field
  absl::string_view value = colon == absl::string_view::npos ? "" : line.substr(colon + 1);
  absl::ConsumePrefix(&value, " ");
  if (has_data_) data_ += '\n';
  data_.append(value.data(), value.size());
  has_data_ = true;
}

void CompletionStream::Feed(absl::string_view bytes, RequestTiming* timing) {
  for (const std::string& data : sse_.Feed(bytes)) Event(data, timing);
}

void CompletionStream::Event(const std::string& data, RequestTiming* t) {
  if (done_ || !error_code_.empty()) return;
  if (data == "[DONE]") {
    done_ = true;
    return;
  }
  const nlohmann::json event = nlohmann::json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (!event.is_object()) {
    error_code_ = "BAD_EVENT";
    return;
  }
  if (event.contains("error")) {
    error_code_ = "STREAM_ERROR";
    return;
  }
  int tokens = 0;
  const auto choices = event.find("choices");
  if (choices != event.end() && choices->is_array()) {
    for (const nlohmann::json& choice : *choices) {
      const auto ids = choice.find("token_ids");
      if (ids != choice.end() && ids->is_array()) tokens += static_cast<int>(ids->size());
    }
  }
  clock_->Chunk(tokens, t);
  counted_tokens_ += tokens;
  // find() on a value that is not an object finds nothing, so a null usage is skipped.
  const auto usage = event.find("usage");
  if (usage == event.end()) return;
  const auto completion = usage->find("completion_tokens");
  if (completion != usage->end() && completion->is_number_integer()) {
    usage_tokens_ = completion->get<int64_t>();
  }
  const auto details = usage->find("prompt_tokens_details");
  if (details == usage->end()) return;
  const auto cached = details->find("cached_tokens");
  if (cached != details->end() && cached->is_number_integer()) {
    t->cached_prompt_tokens = cached->get<int>();
  }
}

std::string CompletionStream::ErrorCode() const {
  if (!error_code_.empty()) return error_code_;
  if (!done_) return "INCOMPLETE_STREAM";
  if (usage_tokens_ >= 0 && usage_tokens_ != counted_tokens_) return "TOKEN_IDS_MISSING";
  if (usage_tokens_ < 0 && counted_tokens_ == 0) return "NO_TOKEN_IDS";
  return "";
}

absl::StatusOr<RequestTimer> OpenAiTimer(const BenchOptions& options, const std::string& model,
                                         absl::Duration timeout) {
  TPSERVE_ASSIGN_OR_RETURN(const OpenAiUrl url, ParseOpenAiUrl(options.openai_url));
  auto target = std::make_shared<Target>();
  net::io_context ioc;
  tcp::resolver resolver(ioc);
  beast::error_code ec;
  target->addresses = resolver.resolve(url.host, url.port, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("--openai-url \"", options.openai_url, "\": ", ec.message()));
  }
  const bool ipv6 = url.host.find(':') != std::string::npos;
  target->host_header = absl::StrCat(ipv6 ? "[" : "", url.host, ipv6 ? "]:" : ":", url.port);
  target->path = url.completions_path;
  if (!options.api_key.empty()) target->authorization = "Bearer " + options.api_key;
  target->timeout = timeout;
  return RequestTimer([target, options, model](const BenchPrompt& prompt) {
    return TimeCompletion(*target, CompletionBody(prompt, options, model));
  });
}

}  // namespace tpserve
