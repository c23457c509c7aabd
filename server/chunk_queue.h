// ChunkQueue: hands one call's EngineChunks from the engine thread to the RPC thread
// that streams them — the chunks of `streams` engine requests (a call's n completions).
//
// The engine's callbacks Push chunks and Finish once per request; the handler thread
// Pops with a timeout so that it can notice a cancelled call between chunks. Chunks
// pushed before the end are all popped before the final status, which comes once every
// request has finished (OK), or with the first failure (then the others are to be
// aborted). Thread-safe; shared by the callbacks and the handler through a shared_ptr,
// so it outlives whichever side ends first.
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

  explicit ChunkQueue(int streams = 1) : streams_(streams) {}

  void Push(EngineChunk chunk);
  // One request's end.
  void Finish(absl::Status status);

  // Waits up to `timeout`. kChunk: *chunk holds the next chunk; kDone: every chunk has
  // been popped and *status is the request's final status; kTimeout: nothing yet.
  Next Pop(absl::Duration timeout, EngineChunk* chunk, absl::Status* status);

 private:
  bool Ready() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  const int streams_;
  std::deque<EngineChunk> chunks_ ABSL_GUARDED_BY(mu_);
  int finished_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<absl::Status> done_ ABSL_GUARDED_BY(mu_);  // the final status, once known
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_CHUNK_QUEUE_H_
