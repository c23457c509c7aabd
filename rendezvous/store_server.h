// StoreServer: the key-value store that ranks rendezvous through (Gloo addresses,
// later anything else a pool agrees on before its collectives exist).
//
// Owned by the coordinator (the frontend's worker pool, the forward tool); ranks reach
// it with TcpStoreClient. Start() binds and returns once the port accepts connections.
// One thread accepts; each connection gets its own thread, so a client blocked in
// get/wait never delays another.
//
// A store started with a worker token (the pool's) serves a connection only once it has
// proved the token (worker_token.h: HMAC over a nonce the server sends first, within
// kAuthTimeout); anything else is answered kDenied and the connection closed. Without
// a token the store is open, for tools and tests that start every rank themselves on
// loopback. What it holds is bounded: keys and values by size (store_wire.h), the
// store by kMaxKeys and kMaxTotalBytes; a request past a limit is refused with an error
// naming it, and a frame past the largest valid request is refused before its body is
// read. A malformed or truncated request closes that connection only. Values live
// until deleted or the server stops. Stop() (or the destructor) unblocks waiting
// clients, closes every socket and joins every thread; it may be called from any
// thread but one.
#ifndef TPSERVE_RENDEZVOUS_STORE_SERVER_H_
#define TPSERVE_RENDEZVOUS_STORE_SERVER_H_

#include <atomic>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "rendezvous/net_socket.h"

namespace tpserve {

struct StoreServerOptions {
  // Where it listens: only where ranks need to reach it (loopback for local ranks).
  std::string bind_host = "127.0.0.1";
  int port = 0;  // 0: an ephemeral port; read it back with port()
  // What clients must prove they hold; empty: an open store.
  std::string token;
};

class StoreServer {
 public:
  // Connections beyond this many are closed on accept.
  static constexpr int kMaxConnections = 512;
  // Longest a single get/wait may block, whatever the client asks.
  static constexpr absl::Duration kMaxWait = absl::Hours(1);
  // How long a new connection has to authenticate.
  static constexpr absl::Duration kAuthTimeout = absl::Seconds(10);
  // What the store holds at most: keys, and key plus value bytes over all keys.
  static constexpr size_t kMaxKeys = 4096;
  static constexpr size_t kMaxTotalBytes = size_t{64} << 20;

  static absl::StatusOr<std::unique_ptr<StoreServer>> Start(const StoreServerOptions& options);
  // An open store (no token).
  static absl::StatusOr<std::unique_ptr<StoreServer>> Start(
      const std::string& bind_host = "127.0.0.1", int port = 0);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const { return port_; }
  // Idempotent.
  void Stop();

 private:
  struct Connection {
    UniqueFd fd;
    std::thread thread;
    std::atomic<bool> done{false};
  };

  StoreServer(UniqueFd listen_fd, UniqueFd wake_read, UniqueFd wake_write, int port,
              std::string token);
  void AcceptLoop();
  void ReapFinished() ABSL_EXCLUSIVE_LOCKS_REQUIRED(conns_mu_);
  void Serve(Connection* conn);
  // Greets the client and, when the store has a token, checks its kAuth; an error
  // (after answering kDenied) closes the connection.
  absl::Status Authenticate(int fd);
  // The response body, or an error that closes the connection.
  absl::StatusOr<std::string> Handle(absl::string_view request);
  std::string HandleSet(std::string key, std::string value);
  std::string HandleGet(uint32_t timeout_ms, const std::string& key);
  std::string HandleWait(uint32_t timeout_ms, const std::vector<std::string>& keys);
  std::string HandleAdd(const std::string& key, int64_t delta);
  std::string HandleDelete(const std::string& key);
  // Stores `value` at `key` if the store stays within kMaxKeys and kMaxTotalBytes;
  // otherwise the kLimit reply naming the limit.
  std::optional<std::string> Put(const std::string& key, std::string value)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const UniqueFd listen_fd_;
  const UniqueFd wake_read_;   // Readable once Stop() runs: ends AcceptLoop's poll.
  const UniqueFd wake_write_;
  const int port_;
  const std::string token_;
  std::thread accept_thread_;
  std::atomic<bool> stopped_{false};

  absl::Mutex conns_mu_;
  std::list<std::unique_ptr<Connection>> conns_ ABSL_GUARDED_BY(conns_mu_);

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::string> data_ ABSL_GUARDED_BY(mu_);
  size_t data_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // keys and values of data_
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace tpserve

#endif  // TPSERVE_RENDEZVOUS_STORE_SERVER_H_
