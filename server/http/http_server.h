// HttpServer: a minimal HTTP/1.1 server for Prometheus scrapes and health checks.
//
// One thread accepts and serves connections one at a time (scrapes are rare and
// cheap). Each connection gets one response and is then closed: no keep-alive, request
// bodies are never read. A client has 2 s to send its request head (at most 8 KiB, up to
// the blank line) and 2 s to take the response, so a silent or slow client holds the
// server for about that long at most. GET and HEAD go to the handler; other methods get
// 405, a malformed request line 400, an oversized head 431. Writes never raise SIGPIPE.
//
// Threading: the handler runs on the server's thread, one call at a time, with the raw
// request path (no query string, not percent-decoded). The destructor stops accepting,
// abandons the connection in progress and joins the thread within ~1 s unless the
// handler itself is slow; do not destroy the server from inside its handler. port() is
// safe from any thread.
#ifndef TPSERVE_SERVER_HTTP_HTTP_SERVER_H_
#define TPSERVE_SERVER_HTTP_HTTP_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>

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

// Called for each GET and HEAD (HEAD sends the same headers and no body) with the
// request path, e.g. "/metrics" for "GET /metrics?x=1 HTTP/1.1".
using HttpHandler = std::function<HttpResponse(absl::string_view path)>;

class HttpServer {
 public:
  // Listens on host:port; port 0 picks a free one (read it back with port()). `host`
  // is resolved as by getaddrinfo: "0.0.0.0", "127.0.0.1", "::", "localhost". Fails
  // with a message naming the address and the errno text, e.g. when the port is in use.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const std::string& host, int port,
                                                           HttpHandler handler);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }

 private:
  // What waiting on a socket ended with.
  enum class Wait { kReady, kTimedOut, kStopping };
  enum class Head { kComplete, kTooLarge, kAbandoned };
  struct Reply;

  explicit HttpServer(HttpHandler handler) : handler_(std::move(handler)) {}
  void AcceptLoop();
  void Serve(int fd);
  // Reads into `head` until it holds "\r\n\r\n"; kAbandoned when the client closes or
  // misses the deadline, or the server is stopping.
  Head ReadHead(int fd, absl::Time deadline, std::string* head);
  Reply Dispatch(absl::string_view head);
  bool SendAll(int fd, absl::string_view data, absl::Time deadline);
  // Reads and drops what the client still sends, briefly, so that closing the socket
  // does not reset the connection before the client has read the response.
  void DrainBeforeClose(int fd);
  Wait WaitFor(int fd, short events, absl::Time deadline);

  const HttpHandler handler_;
  int port_ = 0;
  int listen_fd_ = -1;
  int wake_read_ = -1;  // Readable once the destructor runs: ends every wait.
  int wake_write_ = -1;
  std::thread thread_;
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_HTTP_HTTP_SERVER_H_
