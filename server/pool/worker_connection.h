// The frontend's end of each worker's WorkerControl.Attach stream.
//
// WorkerControlService is the gRPC edge: one sync handler thread per attached worker
// reads Hello, challenges the worker to prove the pool's worker token (a stream that
// does not is ended UNAUTHENTICATED and only reported to OnRefused), asks its
// WorkerListener (the pool) for an Assignment, then forwards every WorkerMessage to the
// listener until the stream ends. WorkerConnection lets other
// threads write to that stream and cancel it, and keeps the handler from returning
// (which would free the stream) while a write is in flight.
//
// Threading: the listener is called from handler threads, concurrently for different
// workers. WorkerConnection methods are thread-safe.
#ifndef TPSERVE_SERVER_POOL_WORKER_CONNECTION_H_
#define TPSERVE_SERVER_POOL_WORKER_CONNECTION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "tpserve/v1/worker.grpc.pb.h"

namespace tpserve {

using WorkerStream =
    grpc::ServerReaderWriter<worker::v1::FrontendMessage, worker::v1::WorkerMessage>;

class WorkerConnection {
 public:
  WorkerConnection(grpc::ServerContext* context, WorkerStream* stream)
      : context_(context), stream_(stream) {}

  // False if the stream is closing or the write failed. Blocks while the worker does not
  // read (flow control) until Cancel().
  bool Write(const worker::v1::FrontendMessage& message);
  // Write, unless another write is in flight (then false at once).
  bool TryWrite(const worker::v1::FrontendMessage& message);
  // Cancels the call if its handler is still running: the worker's reads fail.
  void Cancel();
  // Handler only, before it returns: waits for an in-flight Write, then forbids more.
  void Close();

  // Set once by the listener when it accepts the worker.
  int rank = -1;
  int64_t pid = 0;

 private:
  grpc::ServerContext* const context_;
  WorkerStream* const stream_;
  absl::Mutex write_mu_;  // held across stream_->Write
  absl::Mutex state_mu_;  // never held across a blocking call
  bool closing_ ABSL_GUARDED_BY(state_mu_) = false;
  bool closed_ ABSL_GUARDED_BY(state_mu_) = false;
};

class WorkerListener {
 public:
  virtual ~WorkerListener() = default;
  // A stream that did not prove the worker token was ended (`hello`: what it claimed).
  virtual void OnRefused(const worker::v1::Hello& hello, const std::string& why) = 0;
  // The Assignment for a worker that said Hello and proved the token, or an error that
  // ends its call.
  virtual absl::StatusOr<worker::v1::FrontendMessage> OnHello(
      const std::shared_ptr<WorkerConnection>& conn, const worker::v1::Hello& hello) = 0;
  virtual void OnMessage(const WorkerConnection& conn, const worker::v1::WorkerMessage& m) = 0;
  // The stream ended (the worker left, died, or the call was cancelled).
  virtual void OnClosed(const WorkerConnection& conn) = 0;
};

class WorkerControlService final : public worker::v1::WorkerControl::Service {
 public:
  // `token`: the pool's worker token; empty refuses every worker.
  WorkerControlService(WorkerListener* listener, std::string token)
      : listener_(listener), token_(std::move(token)) {}
  grpc::Status Attach(grpc::ServerContext* context, WorkerStream* stream) override;

 private:
  // Challenge → Proof; OK once the worker has proved the token.
  absl::Status Authenticate(WorkerStream* stream);

  WorkerListener* const listener_;
  const std::string token_;
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_POOL_WORKER_CONNECTION_H_
