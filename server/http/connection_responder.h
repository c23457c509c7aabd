// ConnectionResponder: the HttpResponder that HttpServer gives each request. It keeps the
// answer's state under a lock (which calls are still allowed, the stream bytes not yet
// sent, the OnClose callback) and hands each allowed call to its connection, a
// ResponseSink, which sends it from its own I/O thread. It bounds what waits to be sent
// twice: a stream's Write() data by its own limit, and every handler byte (Write()
// data, Respond()'s body) by the server's ByteBudget, whose share travels with the
// bytes to the connection. No sockets here, so that the state machine is tested on its
// own.
//
// Threading: the HttpResponder methods from any thread; Sent() and Detach() from the
// connection's I/O thread.
#ifndef TPSERVE_SERVER_HTTP_CONNECTION_RESPONDER_H_
#define TPSERVE_SERVER_HTTP_CONNECTION_RESPONDER_H_

#include <cstddef>
#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/http/byte_budget.h"
#include "server/http/http_message.h"

namespace tpserve {

// The connection's side. Each method is called with the responder's lock held and in
// the order of the responder's calls; it must only hand the work to the connection's
// I/O thread, never call back into the responder. `held` is the share of the server's
// queue budget that a handler's bytes hold: the connection keeps it until they are on
// the socket, and gives it back as they get there or when it drops them.
class ResponseSink {
 public:
  virtual ~ResponseSink() = default;
  virtual void SendResponse(HttpResponse response, ByteReservation held) = 0;
  virtual void SendStreamHead(int status, std::string content_type, HttpHeaders headers) = 0;
  virtual void SendStreamData(std::string data, ByteReservation held) = 0;
  virtual void SendStreamEnd() = 0;
  // The response cannot be completed (its stream's queue or the server's budget would
  // overflow, or the responder was dropped mid-stream): close the connection.
  virtual void Abort() = 0;
};

class ConnectionResponder final : public HttpResponder {
 public:
  // `sink` must stay valid until Detach(), `queue_budget` while bytes of it are held.
  // A stream holds at most `max_queued_bytes` written and not yet sent; every handler
  // byte not yet sent, whole responses' too, holds a share of `queue_budget`.
  ConnectionResponder(ResponseSink* sink, size_t max_queued_bytes, ByteBudget* queue_budget)
      : sink_(sink), max_queued_bytes_(max_queued_bytes), queue_budget_(queue_budget) {}
  // Unanswered: sends 500 (outside the budget). Mid-stream: aborts the connection.
  ~ConnectionResponder() override;
  ConnectionResponder(const ConnectionResponder&) = delete;
  ConnectionResponder& operator=(const ConnectionResponder&) = delete;

  void Respond(HttpResponse response) override;
  bool StartStream(int status, std::string content_type, HttpHeaders headers = {}) override;
  bool Write(std::string data) override;
  void End() override;
  void OnClose(std::function<void()> on_close) override;
  bool closed() const override;

  // `bytes` of Write() data have left the connection's queue.
  void Sent(size_t bytes);
  // The connection is done with this response: later calls do nothing. Unless
  // `response_sent`, runs the OnClose callback (on this thread, outside the lock).
  void Detach(bool response_sent);

 private:
  enum class State { kUnanswered, kStreaming, kDone };

  mutable absl::Mutex mu_;
  ResponseSink* sink_ ABSL_GUARDED_BY(mu_);  // null once detached
  State state_ ABSL_GUARDED_BY(mu_) = State::kUnanswered;
  size_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // written, not yet sent
  const size_t max_queued_bytes_;
  ByteBudget* const queue_budget_;
  std::function<void()> on_close_ ABSL_GUARDED_BY(mu_);
  bool lost_ ABSL_GUARDED_BY(mu_) = false;  // detached before the response was sent
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_HTTP_CONNECTION_RESPONDER_H_
