// HttpConnection: one accepted connection of HttpServer, read, parsed (Beast), routed
// and answered on a strand of the server's io_context; ConnectionSet: every open
// connection of one server, for the connection limit and Stop().
//
// Threading: a connection runs on its own strand; Close() and ConnectionSet are safe
// from any thread.
#ifndef TPSERVE_SERVER_HTTP_HTTP_CONNECTION_H_
#define TPSERVE_SERVER_HTTP_HTTP_CONNECTION_H_

#include <boost/asio/ip/tcp.hpp>
#include <cstddef>
#include <memory>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/http/byte_budget.h"
#include "server/http/http_routes.h"
#include "server/http/http_server.h"

namespace tpserve {

class HttpConnection {
 public:
  virtual ~HttpConnection() = default;
  // Ends the connection now (from any thread); an unfinished response's OnClose runs.
  virtual void Close() = 0;
  // Serves no further request (from any thread): an idle connection closes now, a busy
  // one once its response under way has been sent; a request that arrives in full
  // meanwhile gets 503 with "Connection: close" instead of reaching its handler.
  virtual void Drain() = 0;
};

class ConnectionSet {
 public:
  explicit ConnectionSet(size_t max_connections) : max_(max_connections) {}
  // False when the set is full or closing: the caller then drops the connection.
  bool Add(const std::shared_ptr<HttpConnection>& connection);
  void Remove(const HttpConnection* connection);
  // Refuses every connection from now on and closes the open ones.
  void CloseAll();
  // Refuses every connection from now on and drains the open ones.
  void DrainAll();

  // A connection's response is under way (pending or streaming, or a request arriving
  // while draining) / has been sent in full or abandoned: each connection calls them in
  // pairs.
  void ResponseBegan();
  void ResponseEnded();
  // Until no response is under way or `deadline`; true in the first case.
  bool AwaitResponsesEnded(absl::Time deadline);

 private:
  // Sets closing_; the open connections.
  std::vector<std::weak_ptr<HttpConnection>> RefuseMore();

  const size_t max_;
  absl::Mutex mu_;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  size_t responses_under_way_ ABSL_GUARDED_BY(mu_) = 0;
  std::unordered_map<const HttpConnection*, std::weak_ptr<HttpConnection>> open_
      ABSL_GUARDED_BY(mu_);
};

// What every connection of one server shares; outlives them.
struct ConnectionContext {
  HttpServerConfig config;
  HttpRoutes routes;
  ConnectionSet* connections = nullptr;
  ByteBudget* body_budget = nullptr;   // config.max_buffered_body_bytes
  ByteBudget* queue_budget = nullptr;  // config.max_queued_bytes_total
};

// Serves `socket` (whose executor is a strand of its own) until either side closes it.
void ServeConnection(boost::asio::ip::tcp::socket socket, const ConnectionContext& context);

}  // namespace tpserve

#endif  // TPSERVE_SERVER_HTTP_HTTP_CONNECTION_H_
