// StoreServer: the key-value store that ranks rendezvous through (Gloo addresses,
// later anything else a pool agrees on before its collectives exist).
//
// Owned by the coordinator (the forward tool today, the gRPC frontend later); ranks
// reach it with TcpStoreClient. Start() binds and returns once the port accepts
// connections. One thread accepts; each connection gets its own thread, so a client
// blocked in get/wait never delays another. A malformed, oversized or truncated
// request closes that connection only. Values live until deleted or the server stops;
// namespace keys per pool generation (a prefix) and delete a generation's keys when
// it is torn down. Stop() (or the destructor) unblocks waiting clients, closes every
// socket and joins every thread; it may be called from any thread but one.
#ifndef TPSERVE_RENDEZVOUS_STORE_SERVER_H_
#define TPSERVE_RENDEZVOUS_STORE_SERVER_H_

#include <atomic>
#include <list>
#include <memory>
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

class StoreServer {
 public:
  // Connections beyond this many are closed on accept.
  static constexpr int kMaxConnections = 512;
  // Longest a single get/wait may block, whatever the client asks.
  static constexpr absl::Duration kMaxWait = absl::Hours(1);

  // Port 0 picks an ephemeral port; read it back with port().
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

  StoreServer(UniqueFd listen_fd, UniqueFd wake_read, UniqueFd wake_write, int port);
  void AcceptLoop();
  void ReapFinished() ABSL_EXCLUSIVE_LOCKS_REQUIRED(conns_mu_);
  void Serve(Connection* conn);
  // The response body, or an error that closes the connection.
  absl::StatusOr<std::string> Handle(absl::string_view request);
  std::string HandleGet(uint32_t timeout_ms, const std::string& key);
  std::string HandleWait(uint32_t timeout_ms, const std::vector<std::string>& keys);
  std::string HandleAdd(const std::string& key, int64_t delta);

  const UniqueFd listen_fd_;
  const UniqueFd wake_read_;   // Readable once Stop() runs: ends AcceptLoop's poll.
  const UniqueFd wake_write_;
  const int port_;
  std::thread accept_thread_;
  std::atomic<bool> stopped_{false};

  absl::Mutex conns_mu_;
  std::list<std::unique_ptr<Connection>> conns_ ABSL_GUARDED_BY(conns_mu_);

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::string> data_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace tpserve

#endif  // TPSERVE_RENDEZVOUS_STORE_SERVER_H_
