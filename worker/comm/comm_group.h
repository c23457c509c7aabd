// CommGroup: the collectives one tensor-parallel rank runs with its peers.
//
// Every rank of a group must call the same collectives in the same order with the
// same element counts, or the group deadlocks; the frontend guarantees this by sending
// identical step plans. A CommGroup is used by one thread at a time (the rank's
// compute thread). Implementations: GlooCommGroup (CPU processes), LocalCommGroup
// (threads in one process, for tests), NcclCommGroup (GPUs).
#ifndef TPSERVE_WORKER_COMM_COMM_GROUP_H_
#define TPSERVE_WORKER_COMM_COMM_GROUP_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/tensor.h"

namespace tpserve {

class CommGroup {
 public:
  virtual ~CommGroup() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // In place: data[i] = Σ over ranks of data[i].
  virtual absl::Status AllReduceSum(absl::Span<float> data) = 0;
  // out = concat over ranks (in rank order) of each rank's `in`;
  // out.size() must be size() · in.size().
  virtual absl::Status AllGather(absl::Span<const float> in, absl::Span<float> out) = 0;
  // Copies `data` of rank `root` into `data` on every rank.
  virtual absl::Status Broadcast(absl::Span<uint8_t> data, int root) = 0;
  virtual absl::Status Barrier() = 0;
};

// Gathers `local` [..., n] from every rank along its last dim: returns
// [..., size·n] where columns [r·n, (r+1)·n) come from rank r.
absl::StatusOr<Tensor> AllGatherLastDim(CommGroup& comm, const Tensor& local);

}  // namespace tpserve

#endif  // TPSERVE_WORKER_COMM_COMM_GROUP_H_
