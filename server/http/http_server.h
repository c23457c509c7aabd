// HttpServer: tpserve's HTTP/1.1 endpoint (Prometheus's /metrics and health checks
// now; the OpenAI-compatible API will use it too), over cpp-httplib (Debian's
// libcpp-httplib), which parses requests, routes them and writes responses.
//
// Connections: each gets a thread of its own (ConnectionPool, at most max_connections;
// one more is closed at once) and is kept alive for up to max_requests_per_connection
// requests. It is closed when it stays idle for idle_timeout, when a request (head and
// body) has not arrived in full request_timeout after its first byte, however slowly it
// trickles in, when it is larger than max_head_bytes + max_body_bytes (400; 413 for a
// body over max_body_bytes), or when the client takes nothing of a response for
// write_timeout. So an
// idle or slow client holds one thread for a few seconds at most and never delays
// another. Writes never raise SIGPIPE.
//
// Routing: GET and HEAD (same headers, no body) of a routed path go to its handler;
// other methods on that path get 405 with "Allow: GET, HEAD" (after cpp-httplib has read
// their body, so that the connection stays in step), paths with no route 404, malformed
// requests 400. Error responses without a body get a one-line text one.
//
// Threading: handlers run on the connection threads, several at once, so they must be
// thread-safe. Stop() (and the destructor) closes the listening socket, ends every wait
// of every connection at once (a request still arriving is dropped; a handler already
// running finishes, then its response is sent if the client takes it at once) and joins
// every thread; it returns within milliseconds unless a handler is slow. Do not call it
// from a handler. port() is safe from any thread.
#ifndef TPSERVE_SERVER_HTTP_HTTP_SERVER_H_
#define TPSERVE_SERVER_HTTP_HTTP_SERVER_H_

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace tpserve {

struct HttpResponse {
  // Sent as is; a status outside [200, 599] or a content type with CR/LF in it is a bug
  // in the handler and becomes 500.
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

// Called for each GET and HEAD with the request's path: percent-decoded, without the
// query ("/metrics" for "GET /metrics?x=1 HTTP/1.1").
using HttpHandler = std::function<HttpResponse(absl::string_view path)>;

struct HttpRoutes {
  std::map<std::string, HttpHandler> get;  // by exact path, e.g. "/metrics"
  HttpHandler get_any;  // when set, every GET path not in `get` (which it may answer 404)
};

struct HttpServerConfig {
  // Resolved as by getaddrinfo: "0.0.0.0", "127.0.0.1", "::", "localhost".
  std::string host = "127.0.0.1";
  int port = 0;                  // 0 picks a free port (read it back with port())
  size_t max_connections = 256;  // served at once, a thread each
  size_t max_requests_per_connection = 100;
  absl::Duration idle_timeout = absl::Seconds(5);     // before the first request and between
  absl::Duration request_timeout = absl::Seconds(5);  // first byte to the end of its body
  absl::Duration write_timeout = absl::Seconds(5);    // for each write to make progress
  size_t max_head_bytes = 16 << 10;  // request line and headers; each line 8 KiB at most
  size_t max_body_bytes = 1 << 20;   // a larger request body gets 413

  absl::Status Validate() const;
};

class HttpServer {
 public:
  // Listens and serves `routes` until Stop(). Fails with a message naming the address
  // (and the errno text where the system gave one), e.g. when the port is in use.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const HttpServerConfig& config,
                                                           HttpRoutes routes);
  // The default config on host:port, with every GET path going to `handler`.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const std::string& host, int port,
                                                           HttpHandler handler);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  void Stop();
  int port() const { return port_; }

 private:
  class Listener;  // the cpp-httplib server, in http_server.cc

  HttpServer(const HttpServerConfig& config, HttpRoutes routes, int wake_fd);
  absl::Status Listen(const HttpServerConfig& config);

  const int wake_fd_;  // an eventfd, readable once Stop() runs: ends every wait
  std::unique_ptr<Listener> listener_;
  int port_ = 0;
  std::thread thread_;  // cpp-httplib's accept loop
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_HTTP_HTTP_SERVER_H_
