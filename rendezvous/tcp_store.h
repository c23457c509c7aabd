// TcpStoreClient: one rank's connection to a StoreServer.
//
// Two faces: the Status API (Set/Get/Wait/Add/Delete) for our own code, and the
// gloo::rendezvous::Store virtuals that gloo's Context::connectFullMesh calls, which
// report failures by throwing gloo::IoException as gloo expects. Connect() reads the
// server's greeting and, if the store asks, proves the worker token (worker_token.h):
// UNAUTHENTICATED when it has none or the store refuses it. Connect() and every
// blocking call are bounded by a timeout. A request past a store limit is
// RESOURCE_EXHAUSTED naming it (keys and values too long are INVALID_ARGUMENT before
// anything is sent). Calls are serialised by a mutex; a transport
// failure (or a reply that does not arrive in time) closes the connection and every
// later call fails with UNAVAILABLE.
#ifndef TPSERVE_RENDEZVOUS_TCP_STORE_H_
#define TPSERVE_RENDEZVOUS_TCP_STORE_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "gloo/rendezvous/store.h"
#include "rendezvous/net_socket.h"
#include "rendezvous/worker_token.h"  // Connect's token: ProcessWorkerToken() in a rank

namespace tpserve {

class TcpStoreClient : public gloo::rendezvous::Store {
 public:
  // `timeout` bounds the connect and is the wait used by gloo's get() and wait(keys).
  // `token`: the worker token, for a store that requires one.
  static absl::StatusOr<std::unique_ptr<TcpStoreClient>> Connect(
      const std::string& host, int port, absl::Duration timeout = absl::Seconds(30),
      const std::string& token = "");

  absl::Status Set(absl::string_view key, absl::string_view value);
  // Blocks until `key` exists; DEADLINE_EXCEEDED after `timeout`.
  absl::StatusOr<std::string> Get(absl::string_view key, absl::Duration timeout);
  // Blocks until every key exists; DEADLINE_EXCEEDED after `timeout`.
  absl::Status Wait(absl::Span<const std::string> keys, absl::Duration timeout);
  // Adds `delta` to the decimal int64 at `key` (absent = 0); returns the new value.
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta);
  // Returns whether the key existed.
  absl::StatusOr<bool> Delete(absl::string_view key);

  // gloo::rendezvous::Store. Failures throw gloo::IoException.
  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  TcpStoreClient(UniqueFd fd, std::string peer, absl::Duration timeout)
      : fd_(std::move(fd)), peer_(std::move(peer)), timeout_(timeout) {}

  // Sends one request and returns the reply body; the server may hold the reply for
  // up to `server_wait` (a blocking get/wait) before it is overdue.
  absl::StatusOr<std::string> Call(const std::string& request, absl::Duration server_wait);

  absl::Mutex mu_;
  UniqueFd fd_ ABSL_GUARDED_BY(mu_);
  const std::string peer_;  // "host:port", for messages.
  const absl::Duration timeout_;
};

}  // namespace tpserve

#endif  // TPSERVE_RENDEZVOUS_TCP_STORE_H_
