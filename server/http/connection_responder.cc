#include "server/http/connection_responder.h"

#include <algorithm>
#include <utility>

namespace tpserve {

ConnectionResponder::~ConnectionResponder() {
  absl::MutexLock lock(&mu_);
  if (sink_ == nullptr) return;
  if (state_ == State::kUnanswered) {
    sink_->SendResponse(HttpResponse{500, "text/plain; charset=utf-8",
                                     "the request was dropped without an answer\n"},
                        ByteReservation(queue_budget_));
  } else if (state_ == State::kStreaming) {
    sink_->Abort();
  }
}

void ConnectionResponder::Respond(HttpResponse response) {
  absl::MutexLock lock(&mu_);
  if (sink_ == nullptr || state_ != State::kUnanswered) return;
  state_ = State::kDone;
  ByteReservation held(queue_budget_);
  if (!held.Resize(response.body.size())) {  // The server holds too much unsent already.
    sink_->Abort();
    return;
  }
  sink_->SendResponse(std::move(response), std::move(held));
}

bool ConnectionResponder::StartStream(int status, std::string content_type,
                                      HttpHeaders headers) {
  absl::MutexLock lock(&mu_);
  if (sink_ == nullptr || state_ != State::kUnanswered) return false;
  state_ = State::kStreaming;
  sink_->SendStreamHead(status, std::move(content_type), std::move(headers));
  return true;
}

bool ConnectionResponder::Write(std::string data) {
  absl::MutexLock lock(&mu_);
  if (sink_ == nullptr || state_ != State::kStreaming) return false;
  // Either this client is too slow for its stream's bound, or the server holds too much
  // unsent over all its clients.
  ByteReservation held(queue_budget_);
  if (data.size() > max_queued_bytes_ - queued_bytes_ || !held.Resize(data.size())) {
    state_ = State::kDone;
    sink_->Abort();
    return false;
  }
  queued_bytes_ += data.size();
  sink_->SendStreamData(std::move(data), std::move(held));
  return true;
}

void ConnectionResponder::End() {
  absl::MutexLock lock(&mu_);
  if (sink_ == nullptr || state_ != State::kStreaming) return;
  state_ = State::kDone;
  sink_->SendStreamEnd();
}

void ConnectionResponder::OnClose(std::function<void()> on_close) {
  {
    absl::MutexLock lock(&mu_);
    if (!lost_) {
      on_close_ = std::move(on_close);
      return;
    }
  }
  if (on_close) on_close();  // The connection ended before this was set.
}

bool ConnectionResponder::closed() const {
  absl::MutexLock lock(&mu_);
  return sink_ == nullptr || state_ == State::kDone;
}

void ConnectionResponder::Sent(size_t bytes) {
  absl::MutexLock lock(&mu_);
  queued_bytes_ -= std::min(bytes, queued_bytes_);
}

void ConnectionResponder::Detach(bool response_sent) {
  std::function<void()> on_close;
  {
    absl::MutexLock lock(&mu_);
    if (sink_ == nullptr) return;
    sink_ = nullptr;
    if (response_sent) return;
    lost_ = true;
    on_close = std::move(on_close_);
    on_close_ = nullptr;
  }
  if (on_close) on_close();
}

}  // namespace tpserve
