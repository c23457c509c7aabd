// HttpServer: tpserve's HTTP/1.1 endpoint (Prometheus's /metrics and health checks now,
// the OpenAI-compatible API with Server-Sent Events next), asynchronous, on Boost.Beast
// over Boost.Asio: a few I/O threads serve every connection, so a thousand open streams
// need no thousand threads. Beast parses every request (head and body within their
// limits) and serializes every response; this class routes (HttpRoutes) and bounds.
//
// Connections: at most max_connections (one more is closed at once), each kept alive
// for up to max_requests_per_connection requests, answered one at a time (the next
// pipelined request is read once the current response has been sent). A connection is
// closed when it stays idle for idle_timeout (before its first request and between
// requests), when a request has not arrived in full request_timeout after it began,
// however slowly it trickles in (408), when a write makes no progress for
// write_timeout, or when its queue passes a bound (below). A head over max_head_bytes
// gets 431, a body over max_body_bytes 413, a malformed request 400, each closing the
// connection. While a response is pending or streaming the server keeps reading the
// socket, so a client that disconnects (or half-closes) is noticed at once and the
// request's OnClose callback runs: that is how a client cancels. A streamed response
// has no idle limit between writes, only the write progress one. Writes never raise
// SIGPIPE; sockets are close-on-exec.
//
// Request bodies are also bounded server-wide, by max_buffered_body_bytes over all
// connections: a request's body counts from when it begins to arrive (its whole
// Content-Length once the head has come, before any 100 Continue; a chunked body as it
// grows) until its handler has returned; heads count toward nothing. A request that
// would take the total past the limit gets 503 with "Connection: close" and a line
// naming the limit, what it held is given back, and its connection closes after the
// answer; other requests go on. From its handler on the body is the handler's, so
// handlers must bound how many they keep (tpserve's queue a bounded number for
// preparation and refuse more).
//
// Response bytes that handlers have handed over (Write() data, Respond()'s body) and
// that are not yet on the socket are bounded twice: per stream by
// max_queued_stream_bytes, and over all connections by max_queued_bytes_total, so that
// many clients reading slowly (yet fast enough for write_timeout) cannot make the server
// hold max_connections × max_queued_stream_bytes. The server's own bytes (heads, chunk
// framing, its error answers) count toward neither. A Write() that would pass either
// bound, or a Respond() whose body would pass the total, closes its connection (OnClose
// runs; Write() returns false) and what that connection held is given back; other
// connections go on. Bytes are given back as they reach the socket (the kernel's
// buffers count as sent) and whenever their connection ends.
//
// Threading: handlers run on the I/O threads (one connection's calls one at a time,
// different connections' at once) and must not block. Stop() (and the destructor)
// closes the listener and every connection (running OnClose for unfinished
// responses), then joins the I/O threads; it returns within milliseconds, and is
// idempotent. Shutdown() drains first (see there), then Stops. Do not call either from a
// handler. port() is safe from any thread.
#ifndef TPSERVE_SERVER_HTTP_HTTP_SERVER_H_
#define TPSERVE_SERVER_HTTP_HTTP_SERVER_H_

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/http/http_message.h"
#include "server/http/http_routes.h"

namespace tpserve {

struct HttpServerConfig {
  // Resolved as by getaddrinfo: "0.0.0.0", "127.0.0.1", "::", "localhost".
  std::string host = "127.0.0.1";
  int port = 0;  // 0 picks a free port (read it back with port())
  size_t io_threads = 2;
  size_t max_connections = 4096;  // open at once, lingering ones included
  size_t max_requests_per_connection = 1000;
  absl::Duration idle_timeout = absl::Seconds(5);     // before the first request and between
  absl::Duration request_timeout = absl::Seconds(5);  // first byte to the end of its body
  absl::Duration write_timeout = absl::Seconds(5);    // for each write to make progress
  size_t max_head_bytes = 16 << 10;                   // request line and headers
  size_t max_body_bytes = 4 << 20;                    // a larger request body gets 413
  // Request-body bytes held at once, over all connections (a request past it gets 503);
  // at least max_body_bytes.
  size_t max_buffered_body_bytes = 256 << 20;
  size_t max_queued_stream_bytes = 8 << 20;           // per stream, written but not yet sent
  // Bytes written by handlers (streams and whole responses) and not yet sent, over all
  // connections (one past it closes its connection); at least max_queued_stream_bytes.
  size_t max_queued_bytes_total = 512 << 20;

  absl::Status Validate() const;
};

// The handler of main.cc's metrics server: each GET (and HEAD) with its decoded path.
using HttpPathHandler = std::function<HttpResponse(absl::string_view path)>;

class HttpServer {
 public:
  // Listens and serves `routes` until Stop(). Fails on an invalid config or routes, or
  // with a message naming the address (and the system's reason) when it cannot listen,
  // e.g. when the port is in use.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const HttpServerConfig& config,
                                                           HttpRoutes routes);
  // The default config on host:port, with every GET and HEAD going to `handler` and
  // other methods getting 405.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const std::string& host, int port,
                                                           HttpPathHandler handler);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  void Stop();
  // A graceful Stop(), for a drain: closes the listener (a new connection is refused, or
  // closed at once) and idle keep-alive connections, and waits until every response
  // under way has been sent in full (whole, or streamed to its End(), its last byte
  // handed to the kernel) or `deadline` passes; then Stop() closes what is left, running
  // OnClose for unfinished responses. It returns as soon as the last response has been
  // sent, not at the deadline; a handler that never answers holds it to the deadline.
  // Meanwhile no request reaches a handler, and each connection closes after its
  // response under way ("Connection: close" in that response's head if it has not gone
  // yet). A request that had begun to arrive, or is pipelined behind a response whose
  // head said keep-alive, gets 503 with "Connection: close" (and is waited for like a
  // response); one sent on an idle connection after it was closed gets no answer, as
  // after idle_timeout, for the client to retry elsewhere. Idempotent; does nothing
  // after Stop().
  void Shutdown(absl::Time deadline);
  int port() const { return port_; }

 private:
  struct Impl;  // the io_context, acceptor and threads, in http_server.cc

  explicit HttpServer(std::unique_ptr<Impl> impl, int port);

  std::unique_ptr<Impl> impl_;
  const int port_;
  std::atomic<bool> stopped_{false};
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_HTTP_HTTP_SERVER_H_
