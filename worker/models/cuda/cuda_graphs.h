// DecodeGraphs: CUDA graphs of the decode step, one per padded batch size, captured the
// first time a size is used and replayed afterwards, so a decode step costs the host one
// launch instead of a few hundred.
//
// A graph bakes in every pointer and launch shape of the step it captured; the caller
// keeps them stable (fixed buffers, metadata laid out by padded size) and calls Clear()
// whenever one of them changes (a new KV cache, a grown workspace). One rank's compute
// thread.
#ifndef TPSERVE_WORKER_MODELS_CUDA_CUDA_GRAPHS_H_
#define TPSERVE_WORKER_MODELS_CUDA_CUDA_GRAPHS_H_

#include <cuda_runtime_api.h>

#include <map>
#include <set>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"

namespace tpserve {

// 1, 2, 4, ... up to max_batch, and max_batch itself.
std::vector<int> DecodeGraphSizes(int max_batch);

class DecodeGraphs {
 public:
  // sizes: ascending padded batch sizes to capture; empty: no graphs.
  explicit DecodeGraphs(std::vector<int> sizes = {}) : sizes_(std::move(sizes)) {}
  ~DecodeGraphs() { Clear(); }
  DecodeGraphs(const DecodeGraphs&) = delete;
  DecodeGraphs& operator=(const DecodeGraphs&) = delete;

  // The smallest size ≥ seqs, or 0 when seqs exceeds them all.
  int PaddedSize(int seqs) const;
  // Runs a step of `size` on `stream`: the first time a size is seen, `enqueue` runs
  // eagerly (so that lazy initialisation — module loading, library heuristics — happens
  // outside a capture); the second time it is captured and replayed; after that the
  // graph is replayed. `enqueue` must only enqueue work on `stream`. A failed capture
  // (or instantiation) returns its status with the stream out of capture mode, nothing
  // enqueued, and *capture_failed set; any other failure (of the eager run, of the
  // launch) leaves *capture_failed false, and the stream's state unknown.
  absl::Status Run(int size, cudaStream_t stream, absl::FunctionRef<absl::Status()> enqueue,
                   bool* capture_failed);
  // Destroys every captured graph.
  void Clear();
  // Destroys them and captures these sizes from now on ({}: none, PaddedSize is 0).
  void SetSizes(std::vector<int> sizes) {
    Clear();
    sizes_ = std::move(sizes);
  }
  int num_captured() const { return static_cast<int>(execs_.size()); }

 private:
  std::vector<int> sizes_;
  std::set<int> warmed_;  // sizes run eagerly once
  std::map<int, cudaGraphExec_t> execs_;
};

}  // namespace tpserve

#endif  // TPSERVE_WORKER_MODELS_CUDA_CUDA_GRAPHS_H_
