// Internal to the CUDA emulator's NCCL (nccl.cc): the transport between the ranks of a
// communicator, each a process of this host. ncclGetUniqueId names a POSIX shared-memory
// object that every rank maps at init (Shared). A collective moves its data through one
// slot per rank in chunks of kSlotBytes: each rank copies its chunk into its slot, all
// meet at a barrier, each rank reads every slot and writes its output, and all meet
// again before the slots are reused. Sums are taken in rank order (in fp32 for bf16,
// rounded once), so every rank gets the same bits, as NCCL guarantees.
//
// A wait (a barrier, an init) ends early when a peer aborted (Shared::aborted) or its
// process exited — ncclRemoteError — and after TPSERVE_EMU_NCCL_TIMEOUT_S seconds
// (default 60) when a live peer never arrives — ncclSystemError; either becomes the
// communicator's async error (ncclComm::error). One thread per communicator.
#ifndef TPSERVE_TESTING_CUDA_EMU_NCCL_TRANSPORT_H_
#define TPSERVE_TESTING_CUDA_EMU_NCCL_TRANSPORT_H_

#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace tpserve {
namespace emu {

inline constexpr int kMaxRanks = 8;
inline constexpr size_t kSlotBytes = size_t{1} << 20;
inline constexpr char kIdPrefix[] = "/tpserve-emu-nccl-";

// The shared mapping; all zeros when created, which is the state before any rank joins.
struct Shared {
  std::atomic<int32_t> nranks;     // set by the first rank to join
  std::atomic<int32_t> joined;     // ranks that have joined
  std::atomic<int32_t> aborted;    // 1 + the first rank that aborted, or 0
  std::atomic<uint32_t> arrived;   // ranks at the current barrier
  std::atomic<uint32_t> generation;  // barriers completed
  std::atomic<int32_t> pids[kMaxRanks];  // each rank's process, once joined
  alignas(64) unsigned char slots[kMaxRanks][kSlotBytes];
};
static_assert(std::atomic<int32_t>::is_always_lock_free &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "the barrier's atomics must work across processes");

}  // namespace emu
}  // namespace tpserve

// nccl.h's opaque handle.
struct ncclComm {
  int rank = 0;
  int nranks = 1;
  bool blocking = true;
  bool finalized = false;
  bool init_pending = false;      // non-blocking init, until every rank has joined
  bool finalize_pending = false;  // non-blocking finalize, until looked at
  ncclResult_t error = ncclSuccess;  // the async error, once one happened
  std::chrono::steady_clock::time_point init_start;
  std::string name;  // of the shared-memory object
  tpserve::emu::Shared* shared = nullptr;
};

namespace tpserve {
namespace emu {

// The last failure's text, for ncclGetLastError.
std::string& LastError();
// Records `why` as the last error, prints it, returns `result`.
ncclResult_t Fail(ncclResult_t result, const std::string& why);
// A failure of the communicator: its async error from now on (the first one stays).
void Break(ncclComm* comm, ncclResult_t result, const std::string& why);
// Bytes of one element; 0 for a type NCCL does not have.
size_t TypeSize(ncclDataType_t type);
// TPSERVE_EMU_NCCL_TIMEOUT_S, or 60 s.
std::chrono::seconds WaitTimeout();
// Why a wait on `comm` cannot end: a peer aborted or exited (ncclRemoteError, `why`
// set), or ncclSuccess.
ncclResult_t PeerFailure(ncclComm* comm, const char* what, std::string* why);
// Waits until done(), a peer fails, or WaitTimeout() passes since `start`; a failure
// breaks the communicator.
ncclResult_t WaitUntil(ncclComm* comm, const char* what, std::chrono::steady_clock::time_point start,
                       const std::function<bool()>& done);

// WaitUntil with the peer check given (PeerFailure above for the other overload). A
// failure, or the deadline, counts only if done() is still false when asked once more
// after it was seen: a peer that completed the wait and then exited did not fail it.
ncclResult_t WaitUntil(ncclComm* comm, const char* what,
                       std::chrono::steady_clock::time_point start,
                       const std::function<bool()>& done,
                       const std::function<ncclResult_t(std::string* why)>& peer_failure);

enum class Kind { kAllReduce, kAllGather, kBroadcast };

struct Collective {
  Kind kind;
  const char* what;
  const unsigned char* send;
  unsigned char* recv;
  size_t count;  // elements per rank (all-gather) or in all (the others)
  ncclDataType_t type;
  ncclRedOp_t op;
  int root;
};

// Runs `c` through the slots, chunk by chunk (its arguments checked by the caller); a
// failure breaks the communicator.
void Run(ncclComm* comm, const Collective& c);

// Unmaps the shared object and frees `comm`, leaving the name to the peers.
void Unmap(ncclComm* comm);
// Unmap, and unlinks the name (which may already be gone).
void Release(ncclComm* comm);
// Whether every rank has joined; the name is unlinked then (the mappings stay), so
// nothing is left in /dev/shm once the communicator is up.
bool AllJoined(ncclComm* comm);

}  // namespace emu
}  // namespace tpserve

#endif  // TPSERVE_TESTING_CUDA_EMU_NCCL_TRANSPORT_H_
