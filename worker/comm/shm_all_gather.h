// ShmAllGather: the all-gather, all-reduce and broadcast of ranks on one host through one
// POSIX shared-memory segment (GlooCommGroup uses it for every payload among the ranks
// that share a host, a slot's worth at a time, and Gloo's TCP transport between hosts).
//
// The segment holds, for each rank, two slots of slot_bytes (alternate collectives use
// alternate banks) and an epoch counter. Collective number e: each rank copies its input
// into its slot of bank e % 2, publishes epoch e (release), waits until every rank has
// published e (acquire), and copies every slot of the bank out. One wait per collective
// suffices: a rank can only start writing bank e % 2 again at collective e + 2, after
// seeing every rank publish e + 1, which each does only once it has read bank e % 2.
//
// Waiting spins briefly, then yields, then sleeps 50 µs at a time, so a peer that is
// computing (or descheduled on a busy host) costs little CPU. A wait fails with
// UNAVAILABLE as soon as a peer's process has exited or a peer broke the segment
// (Break(), after its own failure), and with DEADLINE_EXCEEDED at the timeout. After a
// failure the object refuses every later call; the caller breaks its whole group.
//
// Rank 0 creates the segment under a fresh random name; every rank opens it by that
// name (a rank on another host, or in another IPC namespace, cannot, which is how the
// caller learns whether all ranks share a host); once every rank has opened it, rank 0
// unlinks the name (Unlink()), so nothing is left in /dev/shm whatever happens later.
// Used by one thread per rank.
#ifndef TPSERVE_WORKER_COMM_SHM_ALL_GATHER_H_
#define TPSERVE_WORKER_COMM_SHM_ALL_GATHER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace tpserve {

struct ShmAllGatherHeader;  // the segment's first bytes (shm_all_gather.cc)

class ShmAllGather {
 public:
  static constexpr int kMaxRanks = 64;

  // A fresh segment name: "/tpserve-ag-<pid>-<random>".
  static std::string NewName();
  // Rank 0 creates the segment (`create`), the others open the one it created.
  static absl::StatusOr<std::unique_ptr<ShmAllGather>> Open(const std::string& name, int rank,
                                                            int size, size_t slot_bytes,
                                                            bool create);
  ~ShmAllGather();
  ShmAllGather(const ShmAllGather&) = delete;
  ShmAllGather& operator=(const ShmAllGather&) = delete;

  // Removes the name (the mappings stay); call once every rank has opened it.
  void Unlink();

  // out = every rank's `in`, in rank order; in.size() must be the same on every rank,
  // at most slot_bytes / sizeof(float), and out.size() == size · in.size().
  absl::Status AllGather(absl::Span<const float> in, absl::Span<float> out, absl::Duration timeout);

  // data = the element-wise sum of every rank's `data` (data.size() the same on every
  // rank, any length): a piece of up to slot_bytes at a time, each rank copying its piece
  // into its slot and then summing the slots in rank order straight out of the segment,
  // so every rank gets the same bits (the bits AllGather and a rank-order sum give).
  absl::Status AllReduceSum(absl::Span<float> data, absl::Duration timeout);

  // data = root's `data` on every rank (data.size() the same on every rank, any length),
  // a slot's worth at a time through root's slot.
  absl::Status Broadcast(absl::Span<float> data, int root, absl::Duration timeout);

  // Marks the segment broken so that peers waiting in a collective fail now.
  void Break();

  size_t slot_bytes() const { return slot_bytes_; }
  int size() const { return size_; }

 private:
  ShmAllGather(std::string name, int rank, int size, size_t slot_bytes, void* base, size_t mapped);
  unsigned char* Slot(int bank, int rank) const;
  // Publishes this rank's next collective once `fill` has written its slot of the bank,
  // waits for every rank's, and returns the bank (or the failure, breaking the segment).
  absl::StatusOr<int> Exchange(const std::function<void(unsigned char* slot)>& fill,
                               absl::Duration timeout);
  // `data` a slot's worth at a time: this rank copies its piece into its slot if
  // `write`, then, once every rank has published, `then` runs on the piece.
  absl::Status InPieces(absl::Span<float> data, absl::Duration timeout, bool write,
                        const std::function<void(float* part, size_t count, int bank)>& then);
  // Waits until every rank has published `epoch`.
  absl::Status WaitForAll(uint64_t epoch, absl::Duration timeout);
  // Why the wait cannot end: a peer broke the segment or exited; OK otherwise.
  absl::Status PeerFailure() const;

  const std::string name_;
  const int rank_;
  const int size_;
  const size_t slot_bytes_;
  void* const base_;
  const size_t mapped_;
  ShmAllGatherHeader* const header_;
  uint64_t epoch_ = 0;  // collectives this rank has started
  absl::Status broken_;
  bool unlinked_ = false;
};

}  // namespace tpserve

#endif  // TPSERVE_WORKER_COMM_SHM_ALL_GATHER_H_
