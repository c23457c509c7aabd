// RawHttpConnection: a blocking TCP connection to 127.0.0.1 for HttpServer's tests and
// benchmark, which need to send exact bytes (malformed, trickled, pipelined, nothing at
// all) and to see exactly what comes back and when the server closes.
//
// Threading: one thread per connection.
#ifndef TPSERVE_SERVER_HTTP_HTTP_TEST_CLIENT_H_
#define TPSERVE_SERVER_HTTP_HTTP_TEST_CLIENT_H_

#include <map>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace tpserve {

struct RawHttpResponse {
  bool complete = false;  // a status line, headers and the Content-Length's body arrived
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;

  std::string header(const std::string& lower_name) const;
};

class RawHttpConnection {
 public:
  // Reads and writes give up after `timeout`.
  explicit RawHttpConnection(int port, absl::Duration timeout = absl::Seconds(5));
  ~RawHttpConnection();
  RawHttpConnection(const RawHttpConnection&) = delete;
  RawHttpConnection& operator=(const RawHttpConnection&) = delete;

  bool connected() const { return connected_; }
  bool Send(absl::string_view data);
  // The next response (HEAD ones: set `head`, their Content-Length has no body).
  RawHttpResponse ReadResponse(bool head = false);
  // Whether the server closes the connection (or resets it) before the timeout;
  // whatever it sends meanwhile is dropped.
  bool WaitForClose();
  void Close();

 private:
  // Appends what arrives to buffer_: false on close, reset or timeout.
  bool Receive();

  int fd_ = -1;
  bool connected_ = false;
  std::string buffer_;  // received, not yet returned
};

// GET `path` on a connection of its own ("Connection: close").
RawHttpResponse HttpGet(int port, absl::string_view path);

}  // namespace tpserve

#endif  // TPSERVE_SERVER_HTTP_HTTP_TEST_CLIENT_H_
