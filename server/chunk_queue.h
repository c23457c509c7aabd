// ChunkQueue: hands one request's EngineChunks from the engine thread to the RPC
// thread that streams them.
//
// The engine's callbacks Push chunks and Finish once; the handler thread Pops with a
// timeout so that it can notice a cancelled call between chunks. Chunks pushed before
// Finish are all popped before the final status. Thread-safe; shared by the callbacks
// and the handler through a shared_ptr, so it outlives whichever side ends first.
#ifndef TPSERVE_SERVER_CHUNK_QUEUE_H_
#define TPSERVE_SERVER_CHUNK_QUEUE_H_

#include <deque>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/request.h"

namespace tpserve {

class ChunkQueue {
 public:
  enum class Next { kChunk, kDone, kTimeout };

  void Push(EngineChunk chunk);
  void Finish(absl::Status status);

  // Waits up to `timeout`. kChunk: *chunk holds the next chunk; kDone: every chunk has
  // been popped and *status is the request's final status; kTimeout: nothing yet.
  Next Pop(absl::Duration timeout, EngineChunk* chunk, absl::Status* status);

 private:
  bool Ready() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::deque<EngineChunk> chunks_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Status> done_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_CHUNK_QUEUE_H_
