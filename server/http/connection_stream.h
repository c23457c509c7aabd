// ConnectionStream: one accepted connection as cpp-httplib reads and writes it
// (httplib::Stream), with the bounds that cpp-httplib's own socket stream lacks, so
// that HttpServer can promise them:
//   - a request must arrive in full before its read deadline, however slowly it
//     trickles in (cpp-httplib bounds each read only, which a slowloris client beats),
//     and within a byte budget (cpp-httplib bounds each header line, not their number);
//   - a write fails when the client takes nothing for write_timeout;
//   - every wait ends at once when the server's wake descriptor becomes readable
//     (HttpServer::Stop), instead of polling for the keep-alive timeout;
//   - writes never raise SIGPIPE.
// Reads are buffered (cpp-httplib reads a request head a byte at a time); what is
// buffered past one request is the start of the next.
//
// Threading: used by the one connection thread that owns the socket; closing it stays
// with the caller.
#ifndef TPSERVE_SERVER_HTTP_CONNECTION_STREAM_H_
#define TPSERVE_SERVER_HTTP_CONNECTION_STREAM_H_

#include <httplib.h>
#include <sys/types.h>

#include <cstddef>
#include <string>

#include "absl/time/time.h"

namespace tpserve {

class ConnectionStream final : public httplib::Stream {
 public:
  ConnectionStream(int fd, int wake_fd, absl::Duration write_timeout)
      : fd_(fd), wake_fd_(wake_fd), write_timeout_(write_timeout) {}

  // Whether a next request has begun to arrive (or is already buffered) before
  // `deadline`; false when the client closes, the deadline passes or the server stops.
  bool WaitForRequest(absl::Time deadline);
  // Starts a request: reads fail once `deadline` has passed or `max_bytes` have been
  // read from here on.
  void StartRequest(absl::Time deadline, size_t max_bytes) {
    read_deadline_ = deadline;
    read_left_ = max_bytes;
  }
  // Lets the current request read `more_bytes` more (its body, once its head is read).
  void AllowMore(size_t more_bytes) { read_left_ += more_bytes; }
  // Half-closes the connection, then reads and drops what the client still sends for
  // up to 500 ms or 64 KiB, until it closes its side: closing a socket with unread
  // input resets the connection, which can destroy a response the client has not read.
  void Linger();
  // Set when the response being written must be the connection's last.
  void CloseAfterResponse() { close_after_response_ = true; }
  bool close_after_response() const { return close_after_response_; }

  // httplib::Stream.
  bool is_readable() const override;
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  socket_t socket() const override { return fd_; }

 private:
  enum class Wait { kReady, kTimedOut, kStopping };
  Wait WaitFor(short events, absl::Time deadline) const;
  // Receives into buffer_ once the socket is readable before `deadline`: the byte
  // count, 0 when the client has closed, -1 on a timeout, a stop or an error.
  ssize_t Fill(absl::Time deadline);

  const int fd_;
  const int wake_fd_;
  const absl::Duration write_timeout_;
  absl::Time read_deadline_ = absl::InfinitePast();
  size_t read_left_ = 0;  // of the current request
  std::string buffer_;    // received, not yet read: buffer_[buffer_pos_:]
  size_t buffer_pos_ = 0;
  bool close_after_response_ = false;
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_HTTP_CONNECTION_STREAM_H_
