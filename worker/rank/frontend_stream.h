// FrontendStream: a worker's end of WorkerControl.Attach (proto/tpserve/v1/worker.proto).
//
// Connect() dials the frontend and opens the stream; a reader thread then queues every
// FrontendMessage. Once the control loop has joined the pool it calls ExitOnLoss(): if
// the stream then ends or fails before Close() — the frontend died or dropped this
// worker — the reader calls `on_lost` right away, from its own thread, so that the
// worker never outlives its pool (the control loop exits the process there). Before
// that, an ending stream makes Next() return false, and Close() returns why (e.g. the
// frontend's UNAUTHENTICATED). Send(), Next() and Close() are for the control loop's
// thread.
#ifndef TPSERVE_WORKER_RANK_FRONTEND_STREAM_H_
#define TPSERVE_WORKER_RANK_FRONTEND_STREAM_H_

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "tpserve/v1/worker.grpc.pb.h"

namespace tpserve {

class FrontendStream {
 public:
  // `address`: "unix:/path" or "host:port". UNAVAILABLE if the frontend is not reachable
  // within `connect_timeout`.
  static absl::StatusOr<std::unique_ptr<FrontendStream>> Connect(const std::string& address,
                                                                 absl::Duration connect_timeout);
  ~FrontendStream();  // Close()

  // From now on, a stream that ends before Close() calls `on_lost` (at once if it has
  // already ended).
  void ExitOnLoss(std::function<void()> on_lost);

  // False once the stream is broken.
  bool Send(const worker::v1::WorkerMessage& message);
  // The next message; false when the stream has ended and the queue is drained.
  bool Next(worker::v1::FrontendMessage* message);
  // Half-closes, waits up to `linger` for the frontend to end the call (so a last Error
  // is delivered), then cancels it and joins the reader. Returns the call's status (a
  // cancelled call: CANCELLED). Idempotent: later calls return the same.
  absl::Status Close(absl::Duration linger);

 private:
  FrontendStream() = default;
  void ReadLoop();

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<worker::v1::WorkerControl::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<worker::v1::WorkerMessage, worker::v1::FrontendMessage>>
      stream_;
  std::thread reader_;

  absl::Mutex mu_;
  std::function<void()> on_lost_ ABSL_GUARDED_BY(mu_);
  std::deque<worker::v1::FrontendMessage> queue_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ = false;  // control loop's thread only
  absl::Status final_status_;  // control loop's thread only, set by Close()
};

}  // namespace tpserve

#endif  // TPSERVE_WORKER_RANK_FRONTEND_STREAM_H_
