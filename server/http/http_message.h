// What HttpServer's handlers see and give: HttpRequest (one parsed request), HttpResponse
// (a whole answer) and HttpResponder (the handle through which a request is answered,
// at once or later, whole or streamed), plus the two handler kinds.
//
// Threading: HttpRequest and HttpResponse are plain values. An HttpResponder is
// thread-safe: any method may be called from any thread, also after the connection has
// closed (they then do nothing, or return false).
#ifndef TPSERVE_SERVER_HTTP_HTTP_MESSAGE_H_
#define TPSERVE_SERVER_HTTP_HTTP_MESSAGE_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace tpserve {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;  // "GET", as sent (methods are case-sensitive)
  std::string target;  // as sent: "/v1/models?x=1"
  std::string path;    // percent-decoded, without the query: "/v1/models"
  std::string query;   // after '?', not decoded: "x=1"
  HttpHeaders headers;  // in arrival order, names as sent
  std::string body;     // de-chunked
  std::string peer;     // "127.0.0.1:50712", "[::1]:50712"

  // The first header named `name`, compared case-insensitively.
  std::optional<std::string> header(absl::string_view name) const;
};

struct HttpResponse {
  // A status outside [200, 599], or a content type or header with CR, LF or NUL in it,
  // is a bug in the handler and becomes 500. An error status (>= 400) with an empty
  // body gets a one-line text one.
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  // Added as they are; Content-Length, Transfer-Encoding and Connection are the
  // server's and dropped.
  HttpHeaders headers;
};

// One request's answer. Exactly one of: Respond() once; or StartStream() once, Write()
// any number of times, End() once. Calls out of this order are ignored (Write returns
// false). Dropping the last reference before answering sends 500 (before the stream
// started) or closes the connection (mid-stream), so a forgotten request never hangs.
class HttpResponder {
 public:
  virtual ~HttpResponder() = default;

  // When its body would take the server's unsent bytes past max_queued_bytes_total, the
  // connection is closed instead (and OnClose's callback runs).
  virtual void Respond(HttpResponse response) = 0;
  // A streamed response: chunked transfer encoding on HTTP/1.1 (on HTTP/1.0 the body
  // ends with the connection). False when the connection is gone.
  virtual bool StartStream(int status, std::string content_type, HttpHeaders headers = {}) = 0;
  // Queues `data` to be sent after everything written before. False once the
  // connection is gone, or when more than max_queued_stream_bytes would be waiting for
  // a slow client, or more than max_queued_bytes_total for all of the server's: then the
  // connection is closed (and OnClose's callback runs).
  virtual bool Write(std::string data) = 0;
  virtual void End() = 0;
  // `on_close` runs once, on an I/O thread, if the connection ends before the response
  // was sent in full: the client disconnected (noticed within milliseconds even while
  // nothing is being written), a write timed out, a queue bound was passed or
  // the server is stopping. It must not block. Set it before the handler returns;
  // set later, after the connection has already ended, it runs at once on the
  // caller's thread.
  virtual void OnClose(std::function<void()> on_close) = 0;
  // True once nothing more can be sent: the connection ended or the response is done.
  virtual bool closed() const = 0;
};

// Both kinds run on an I/O thread and must not block. An async handler hands the work
// elsewhere and answers through `responder` later, from any thread. The server counts a
// request's body in max_buffered_body_bytes only until its handler returns: a handler
// that keeps requests (or their bodies) must bound how many it keeps.
using HttpAsyncHandler =
    std::function<void(HttpRequest request, std::shared_ptr<HttpResponder> responder)>;
// A quick synchronous one (metrics, health).
using HttpHandler = std::function<HttpResponse(const HttpRequest& request)>;

// RFC 9110's token: a method or a header name.
bool IsHttpToken(absl::string_view s);

// "%2Fa%20b" → "/a b". False on a malformed escape or an escaped NUL.
bool PercentDecode(absl::string_view in, std::string* out);

}  // namespace tpserve

#endif  // TPSERVE_SERVER_HTTP_HTTP_MESSAGE_H_
