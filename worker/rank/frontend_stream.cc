#include "worker/rank/frontend_stream.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "tpserve/v1/protocol_version.h"

namespace tpserve {

using worker::v1::FrontendMessage;
using worker::v1::WorkerMessage;

absl::StatusOr<std::unique_ptr<FrontendStream>> FrontendStream::Connect(
    const std::string& address, absl::Duration connect_timeout) {
  std::unique_ptr<FrontendStream> s(new FrontendStream());
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);  // plans of long prompts may exceed the 4 MiB default
  args.SetMaxSendMessageSize(-1);
  // A frontend that vanishes without a trace ends the stream within seconds.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kControlKeepaliveMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kControlKeepaliveTimeoutMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  s->channel_ = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  if (!s->channel_->WaitForConnected(absl::ToChronoTime(absl::Now() + connect_timeout))) {
    return absl::UnavailableError(absl::StrCat("cannot reach the frontend at ", address,
                                               " within ", absl::FormatDuration(connect_timeout)));
  }
  s->stub_ = worker::v1::WorkerControl::NewStub(s->channel_);
  s->stream_ = s->stub_->Attach(&s->context_);
  s->reader_ = std::thread([p = s.get()] { p->ReadLoop(); });
  return s;
}

FrontendStream::~FrontendStream() { Close(absl::ZeroDuration()).IgnoreError(); }

void FrontendStream::ExitOnLoss(std::function<void()> on_lost) {
  bool lost;
  {
    absl::MutexLock lock(&mu_);
    on_lost_ = on_lost;
    lost = ended_ && !closing_;
  }
  if (lost) on_lost();
}

void FrontendStream::ReadLoop() {
  FrontendMessage message;
  while (stream_->Read(&message)) {
    absl::MutexLock lock(&mu_);
    queue_.push_back(std::move(message));
    message.Clear();
  }
  std::function<void()> on_lost;
  {
    absl::MutexLock lock(&mu_);
    ended_ = true;
    if (!closing_) on_lost = on_lost_;
  }
  if (on_lost) on_lost();
}

bool FrontendStream::Send(const WorkerMessage& message) { return stream_->Write(message); }

bool FrontendStream::Next(FrontendMessage* message) {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](FrontendStream* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
        return !s->queue_.empty() || s->ended_;
      },
      this));
  if (queue_.empty()) return false;
  *message = std::move(queue_.front());
  queue_.pop_front();
  return true;
}

absl::Status FrontendStream::Close(absl::Duration linger) {
  if (closed_ || stream_ == nullptr) return final_status_;  // or Connect() never opened it
  closed_ = true;
  {
    absl::MutexLock lock(&mu_);
    closing_ = true;
  }
  stream_->WritesDone();
  bool ended;
  {
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(&ended_), linger);
    ended = ended_;
  }
  if (!ended) context_.TryCancel();  // an ended call keeps the frontend's status
  reader_.join();
  const grpc::Status status = stream_->Finish();
  final_status_ = absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                               status.error_message());
  return final_status_;
}

}  // namespace tpserve
