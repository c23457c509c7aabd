// Blocking TCP helpers for the rendezvous store: an owning fd, listen/connect, and
// length-prefixed frames sent and received against a deadline.
//
// Every call blocks the calling thread at most until its deadline; none raises
// SIGPIPE (writes use MSG_NOSIGNAL). Thread-compatible: one fd, one thread at a time,
// except ShutdownBoth(), which may be called from any thread to wake a blocked peer.
#ifndef TPSERVE_RENDEZVOUS_NET_SOCKET_H_
#define TPSERVE_RENDEZVOUS_NET_SOCKET_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace tpserve {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release();
  void reset(int fd = -1);
  // shutdown(SHUT_RDWR): wakes any thread blocked on this socket; keeps the fd open.
  void ShutdownBoth() const;

 private:
  int fd_ = -1;
};

// A listening socket on host:port (port 0 picks an ephemeral port).
absl::StatusOr<UniqueFd> ListenTcp(const std::string& host, int port);
// The port a bound socket listens on.
absl::StatusOr<int> BoundPort(int fd);
// Connects to host:port, retrying refused connections until `deadline` (the server
// may still be starting).
absl::StatusOr<UniqueFd> ConnectTcp(const std::string& host, int port, absl::Time deadline);

// The local IP address this host sends from to reach host:port: the kernel's route,
// asked by connecting a UDP socket (nothing is sent). What a rank binds its collectives
// to so that peers on other hosts reach it on the interface that reaches the store
// (loopback for a loopback host). InvalidArgument when host does not resolve.
absl::StatusOr<std::string> LocalAddressToward(const std::string& host, int port);

// A frame is a little-endian u32 body length followed by the body.
absl::Status SendFrame(int fd, absl::string_view body, absl::Time deadline);
// Fails on EOF, on a truncated frame, on a body longer than `max_body` (without
// reading it), or at the deadline.
absl::StatusOr<std::string> RecvFrame(int fd, size_t max_body, absl::Time deadline);

}  // namespace tpserve

#endif  // TPSERVE_RENDEZVOUS_NET_SOCKET_H_
