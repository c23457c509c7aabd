// Test clients for HttpServer's tests and benchmarks, which need to send exact bytes
// (malformed, trickled, pipelined, nothing at all) and to see exactly what comes back
// and when the server closes:
//   - RawHttpConnection: one blocking TCP connection to 127.0.0.1, with a reader for
//     whole responses (Content-Length or chunked) and one for a stream's chunks as
//     they arrive;
//   - ConcurrentStreams: many connections read at once on the calling thread (epoll),
//     so that a thousand streams need no thousand client threads.
//
// Threading: each object is used by one thread at a time.
#ifndef TPSERVE_SERVER_HTTP_HTTP_TEST_CLIENT_H_
#define TPSERVE_SERVER_HTTP_HTTP_TEST_CLIENT_H_

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace tpserve {

struct RawHttpResponse {
  bool complete = false;  // a status line, headers and the whole body arrived
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;  // de-chunked

  std::string header(const std::string& lower_name) const;
};

class RawHttpConnection {
 public:
  // Reads and writes give up after `timeout`. A `receive_buffer` (SO_RCVBUF) makes a
  // client that stops reading stall the server's writes sooner.
  explicit RawHttpConnection(int port, absl::Duration timeout = absl::Seconds(5),
                             int receive_buffer = 0);
  ~RawHttpConnection();
  RawHttpConnection(const RawHttpConnection&) = delete;
  RawHttpConnection& operator=(const RawHttpConnection&) = delete;

  bool connected() const { return connected_; }
  bool Send(absl::string_view data);
  // The next response (HEAD ones: set `head`, their Content-Length has no body).
  RawHttpResponse ReadResponse(bool head = false);
  // The status line and headers only: then ReadChunk() for a chunked body.
  RawHttpResponse ReadHead();
  // The next chunk's data: "" for the last chunk, nullopt on a close or timeout.
  std::optional<std::string> ReadChunk();
  // Everything until the server closes the connection (a body that the close ends).
  std::string ReadToClose();
  // Whether the server closes the connection (or resets it) before the timeout;
  // whatever it sends meanwhile is dropped.
  bool WaitForClose();
  void Close();

 private:
  // Appends what arrives to buffer_: false on close, reset or timeout.
  bool Receive();
  // The next CRLF-terminated line, without it; nullopt on failure.
  std::optional<std::string> ReadLine();
  bool ReadBytes(size_t count, std::string* out);

  int fd_ = -1;
  bool connected_ = false;
  std::string buffer_;  // received, not yet returned
};

// GET `path` on a connection of its own ("Connection: close").
RawHttpResponse HttpGet(int port, absl::string_view path);

class ConcurrentStreams {
 public:
  // Opens `count` non-blocking connections; Run() sends `request` on each.
  ConcurrentStreams(int port, int count, std::string request);
  ~ConcurrentStreams();
  ConcurrentStreams(const ConcurrentStreams&) = delete;
  ConcurrentStreams& operator=(const ConcurrentStreams&) = delete;

  // Until every connection has been closed by the server (or failed) or `deadline`:
  // sends the request, then calls `on_data(stream, bytes)` with the raw bytes (head,
  // chunk framing and all) as they arrive. Returns how many connections ended.
  int Run(absl::Time deadline, const std::function<void(int, absl::string_view)>& on_data);

 private:
  struct Stream {
    int fd = -1;
    size_t sent = 0;
    bool ended = false;
  };
  const std::string request_;
  std::vector<Stream> streams_;
};

// The number of threads of this process (/proc/self/task) and its resident set in KiB
// (VmRSS in /proc/self/status): 0 where unknown.
int ThreadCount();
long ResidentKiB();

}  // namespace tpserve

#endif  // TPSERVE_SERVER_HTTP_HTTP_TEST_CLIENT_H_
