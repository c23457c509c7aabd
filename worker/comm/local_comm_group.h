// LocalCommGroup: a CommGroup whose ranks are threads of one process.
//
// For unit tests of the parallel layers and the model: T threads, one per rank, each
// owning its LocalCommGroup from LocalCommGroup::Create(T). Every collective is two
// rendezvous: all ranks publish their buffers, then each reads what it needs.
#ifndef TPSERVE_WORKER_COMM_LOCAL_COMM_GROUP_H_
#define TPSERVE_WORKER_COMM_LOCAL_COMM_GROUP_H_

#include <functional>
#include <memory>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "worker/comm/comm_group.h"

namespace tpserve {

class LocalCommGroup : public CommGroup {
 public:
  // One group per rank, sharing a hub.
  static std::vector<std::unique_ptr<LocalCommGroup>> Create(int size);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::Status AllReduceSum(absl::Span<float> data) override;
  absl::Status AllGather(absl::Span<const float> in, absl::Span<float> out) override;
  absl::Status Broadcast(absl::Span<uint8_t> data, int root) override;
  absl::Status Barrier() override;

  struct Hub;

 private:
  LocalCommGroup(std::shared_ptr<Hub> hub, int rank, int size)
      : hub_(std::move(hub)), rank_(rank), size_(size) {}

  std::shared_ptr<Hub> hub_;
  int rank_;
  int size_;
};

// Runs fn(rank, comm) on `size` threads, one per rank, and waits for all of them.
void RunOnLocalRanks(int size, const std::function<void(int, CommGroup&)>& fn);

}  // namespace tpserve

#endif  // TPSERVE_WORKER_COMM_LOCAL_COMM_GROUP_H_
