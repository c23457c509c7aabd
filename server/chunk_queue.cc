#include "server/chunk_queue.h"

#include <utility>

namespace tpserve {

void ChunkQueue::Push(EngineChunk chunk) {
  absl::MutexLock lock(&mu_);
  chunks_.push_back(std::move(chunk));
}

void ChunkQueue::Finish(absl::Status status) {
  absl::MutexLock lock(&mu_);
  if (done_.has_value()) return;  // a failure ended the call already
  if (!status.ok()) {
    done_ = std::move(status);
  } else if (++finished_ == streams_) {
    done_ = absl::OkStatus();
  }
}

bool ChunkQueue::Ready() const { return !chunks_.empty() || done_.has_value(); }

ChunkQueue::Next ChunkQueue::Pop(absl::Duration timeout, EngineChunk* chunk,
                                 absl::Status* status) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(this, &ChunkQueue::Ready), timeout);
  if (!chunks_.empty()) {
    *chunk = std::move(chunks_.front());
    chunks_.pop_front();
    return Next::kChunk;
  }
  if (done_.has_value()) {
    *status = *done_;
    return Next::kDone;
  }
  return Next::kTimeout;
}

}  // namespace tpserve
