#include "server/pool/worker_connection.h"

#include <string>

#include "base/grpc_status.h"
#include "base/status_macros.h"
#include "rendezvous/worker_token.h"

namespace tpserve {

using worker::v1::FrontendMessage;
using worker::v1::WorkerMessage;

bool WorkerConnection::Write(const FrontendMessage& message) {
  absl::MutexLock write(&write_mu_);
  {
    absl::MutexLock state(&state_mu_);
    if (closing_) return false;
  }
  return stream_->Write(message);
}

bool WorkerConnection::TryWrite(const FrontendMessage& message) {
  if (!write_mu_.TryLock()) return false;
  bool written = false;
  {
    absl::MutexLock state(&state_mu_);
    written = !closing_;
  }
  if (written) written = stream_->Write(message);
  write_mu_.Unlock();
  return written;
}

void WorkerConnection::Cancel() {
  absl::MutexLock state(&state_mu_);
  if (!closed_) context_->TryCancel();
}

void WorkerConnection::Close() {
  {
    absl::MutexLock state(&state_mu_);
    closing_ = true;
  }
  { absl::MutexLock write(&write_mu_); }  // a Write in flight finishes first
  absl::MutexLock state(&state_mu_);
  closed_ = true;
}

absl::Status WorkerControlService::Authenticate(WorkerStream* stream) {
  TPSERVE_ASSIGN_OR_RETURN(std::string nonce, RandomBytes(kNonceBytes));
  FrontendMessage challenge;
  challenge.mutable_challenge()->set_nonce(nonce);
  WorkerMessage m;
  if (!stream->Write(challenge) || !stream->Read(&m)) {
    return absl::UnauthenticatedError("the stream ended before a Proof");
  }
  if (!m.has_proof()) {
    return absl::UnauthenticatedError("expected a Proof of the worker token after the Challenge");
  }
  if (!VerifyWorkerTokenProof(token_, ProofChannel::kControl, nonce, m.proof().hmac())) {
    return absl::UnauthenticatedError(
        "the Proof does not match the pool's worker token (a worker of another pool, or "
        "started without the frontend's --worker-token-file)");
  }
  return absl::OkStatus();
}

grpc::Status WorkerControlService::Attach(grpc::ServerContext* context, WorkerStream* stream) {
  auto conn = std::make_shared<WorkerConnection>(context, stream);
  WorkerMessage m;
  if (!stream->Read(&m)) return grpc::Status::OK;
  if (!m.has_hello()) {
    return ToGrpcStatus(absl::FailedPreconditionError("the first message must be Hello"));
  }
  const worker::v1::Hello hello = m.hello();
  if (absl::Status s = Authenticate(stream); !s.ok()) {
    listener_->OnRefused(hello, std::string(s.message()));
    return ToGrpcStatus(s);
  }
  absl::StatusOr<FrontendMessage> assignment = listener_->OnHello(conn, hello);
  if (!assignment.ok()) {
    return ToGrpcStatus(assignment.status());
  }
  if (conn->Write(*assignment)) {
    while (stream->Read(&m)) listener_->OnMessage(*conn, m);
  }
  listener_->OnClosed(*conn);
  conn->Close();
  return grpc::Status::OK;
}

}  // namespace tpserve
