// The NCCL calls of worker/comm/nccl_comm_group.cc, defined for the CUDA emulator (emu.h)
// in place of libnccl, for communicators of 1 to kMaxRanks ranks, each rank a process on
// this host (as the worker pool runs them).
//
// Transport: ncclGetUniqueId names a POSIX shared-memory object; every rank maps it at
// init. A collective moves its data through one slot per rank in chunks of kSlotBytes:
// each rank copies its chunk into its slot, all meet at a barrier, each rank reads every
// slot and writes its output, and all meet again before the slots are reused. Sums are
// taken in rank order (in fp32 for bf16, rounded once), so every rank gets the same bits,
// as NCCL guarantees. A collective is stream work (stream_work.h): it runs at the call,
// or at each replay of a graph that captured it, blocking the host thread until its peers
// arrive, as a device would block the stream.
//
// Failure, as the comm group sees it from NCCL: a rank that aborts, or a peer process
// that exits, makes every peer waiting at a barrier or an init fail with ncclRemoteError
// at once; a peer that is alive but never arrives fails the wait with ncclSystemError
// after TPSERVE_EMU_NCCL_TIMEOUT_S seconds (default 60), where a real device would hang
// until aborted (the host thread is the one waiting here, so nothing else could abort).
// Errors are the communicator's async error (ncclCommGetAsyncError) from then on, and
// every later collective returns it. A non-blocking communicator's init returns
// ncclInProgress and completes at an ncclCommGetAsyncError once every rank has joined.
//
// Refused as NCCL reports misuse: an id that ncclGetUniqueId did not make, ranks that
// disagree on the size, a rank joining twice, a root outside the communicator, a buffer
// outside device memory, a call on a finalized communicator. Not modelled: fp16 and
// fp8 reductions, group calls, point-to-point, and every call the comm group does not
// make.
#include <fcntl.h>
#include <nccl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <thread>

#include "worker/kernels/cuda/emu/stream_work.h"

namespace tpserve {
namespace emu {
namespace {

constexpr int kMaxRanks = 8;
constexpr size_t kSlotBytes = size_t{1} << 20;
constexpr char kIdPrefix[] = "/tpserve-emu-nccl-";

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

}  // namespace
}  // namespace emu
}  // namespace tpserve

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
namespace {

std::string& LastError() {
  static std::string* last = new std::string;
  return *last;
}

ncclResult_t Fail(ncclResult_t result, const std::string& why) {
  LastError() = why;
  std::fprintf(stderr, "emu: NCCL: %s\n", why.c_str());
  return result;
}

// A failure of the communicator: its async error from now on.
void Break(ncclComm* comm, ncclResult_t result, const std::string& why) {
  if (comm->error == ncclSuccess) comm->error = Fail(result, why);
}

size_t TypeSize(ncclDataType_t type) {
  switch (type) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
  }
}

std::chrono::seconds WaitTimeout() {
  const char* env = std::getenv("TPSERVE_EMU_NCCL_TIMEOUT_S");
  const long seconds = env != nullptr ? std::strtol(env, nullptr, 10) : 0;
  return std::chrono::seconds(seconds > 0 ? seconds : 60);
}

// Whether process `pid` has exited: gone, or a zombie its parent has not reaped yet (a
// test whose rank 0 is the parent of the others waits in a collective, not in waitpid).
bool Exited(int32_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const size_t paren = line.rfind(')');  // the command name may hold anything
  if (paren == std::string::npos || paren + 2 >= line.size()) return true;
  const char state = line[paren + 2];
  return state == 'Z' || state == 'X';
}

// Why a wait on `comm` cannot end: a peer aborted or exited (ncclRemoteError), or nothing.
ncclResult_t PeerFailure(ncclComm* comm, const char* what, std::string* why) {
  Shared* s = comm->shared;
  if (const int32_t aborted = s->aborted.load(std::memory_order_acquire); aborted != 0) {
    *why = std::string(what) + ": rank " + std::to_string(aborted - 1) + " aborted the communicator";
    return ncclRemoteError;
  }
  for (int r = 0; r < comm->nranks; ++r) {
    const int32_t pid = s->pids[r].load(std::memory_order_acquire);
    if (r != comm->rank && pid != 0 && Exited(pid)) {
      *why = std::string(what) + ": rank " + std::to_string(r) + " (pid " + std::to_string(pid) +
             ") exited";
      return ncclRemoteError;
    }
  }
  return ncclSuccess;
}

// Waits until done(), a peer fails, or WaitTimeout() passes since `start`.
ncclResult_t WaitUntil(ncclComm* comm, const char* what, std::chrono::steady_clock::time_point start,
                       const std::function<bool()>& done) {
  const auto deadline = start + WaitTimeout();
  for (int spins = 0;; ++spins) {
    if (done()) return ncclSuccess;
    if (spins < 256) {
      std::this_thread::yield();
      continue;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    if (spins % 64 != 0) continue;  // the checks below read /proc
    std::string why;
    if (const ncclResult_t failed = PeerFailure(comm, what, &why); failed != ncclSuccess) {
      Break(comm, failed, why);
      return failed;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      Break(comm, ncclSystemError,
            std::string(what) + ": a peer did not arrive within TPSERVE_EMU_NCCL_TIMEOUT_S (" +
                std::to_string(WaitTimeout().count()) + " s)");
      return ncclSystemError;
    }
  }
}

// Every rank of `comm` meets here; the slots written before are visible to all after.
ncclResult_t Barrier(ncclComm* comm, const char* what) {
  Shared* s = comm->shared;
  const uint32_t generation = s->generation.load(std::memory_order_acquire);
  if (s->arrived.fetch_add(1, std::memory_order_acq_rel) + 1 ==
      static_cast<uint32_t>(comm->nranks)) {
    s->arrived.store(0, std::memory_order_relaxed);
    s->generation.fetch_add(1, std::memory_order_release);
    return ncclSuccess;
  }
  return WaitUntil(comm, what, std::chrono::steady_clock::now(), [s, generation] {
    return s->generation.load(std::memory_order_acquire) != generation;
  });
}

float Bf16ToFloat(uint16_t bits) {
  const uint32_t wide = uint32_t{bits} << 16;
  float f;
  std::memcpy(&f, &wide, sizeof(f));
  return f;
}

uint16_t FloatToBf16(float f) {  // round to nearest even; NaN stays NaN
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

template <typename T>
T Apply(ncclRedOp_t op, T a, T b) {
  switch (op) {
    case ncclProd: return a * b;
    case ncclMax: return a > b ? a : b;
    case ncclMin: return a < b ? a : b;
    default: return a + b;  // ncclSum, and ncclAvg before its division
  }
}

// out[i] = op over ranks (in rank order) of slot[r][i], for n elements of T, held as
// Wide while reducing (float for bf16).
template <typename Wide>
void ReduceSlots(ncclComm* comm, ncclRedOp_t op, size_t n, void* out,
                 Wide (*load)(const unsigned char*, size_t), void (*store)(void*, size_t, Wide)) {
  for (size_t i = 0; i < n; ++i) {
    Wide acc = load(comm->shared->slots[0], i);
    for (int r = 1; r < comm->nranks; ++r) acc = Apply(op, acc, load(comm->shared->slots[r], i));
    if (op == ncclAvg) acc = acc / static_cast<Wide>(comm->nranks);
    store(out, i, acc);
  }
}

template <typename T>
T LoadAs(const unsigned char* p, size_t i) {
  T v;
  std::memcpy(&v, p + i * sizeof(T), sizeof(T));
  return v;
}

template <typename T>
void StoreAs(void* p, size_t i, T v) {
  std::memcpy(static_cast<unsigned char*>(p) + i * sizeof(T), &v, sizeof(T));
}

float LoadBf16(const unsigned char* p, size_t i) { return Bf16ToFloat(LoadAs<uint16_t>(p, i)); }
void StoreBf16(void* p, size_t i, float v) { StoreAs<uint16_t>(p, i, FloatToBf16(v)); }

void Reduce(ncclComm* comm, ncclDataType_t type, ncclRedOp_t op, size_t n, void* out) {
  switch (type) {
    case ncclInt8: return ReduceSlots<int8_t>(comm, op, n, out, LoadAs, StoreAs);
    case ncclUint8: return ReduceSlots<uint8_t>(comm, op, n, out, LoadAs, StoreAs);
    case ncclInt32: return ReduceSlots<int32_t>(comm, op, n, out, LoadAs, StoreAs);
    case ncclUint32: return ReduceSlots<uint32_t>(comm, op, n, out, LoadAs, StoreAs);
    case ncclInt64: return ReduceSlots<int64_t>(comm, op, n, out, LoadAs, StoreAs);
    case ncclUint64: return ReduceSlots<uint64_t>(comm, op, n, out, LoadAs, StoreAs);
    case ncclFloat32: return ReduceSlots<float>(comm, op, n, out, LoadAs, StoreAs);
    case ncclFloat64: return ReduceSlots<double>(comm, op, n, out, LoadAs, StoreAs);
    case ncclBfloat16: return ReduceSlots<float>(comm, op, n, out, LoadBf16, StoreBf16);
    default: return;  // refused at the call
  }
}

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

// Runs `c` through the slots, chunk by chunk; a failure breaks the communicator.
void Run(ncclComm* comm, const Collective& c) {
  if (comm->error != ncclSuccess) return;  // a broken communicator moves nothing
  const size_t size = TypeSize(c.type), per_chunk = kSlotBytes / size;
  unsigned char* const mine = comm->shared->slots[comm->rank];
  for (size_t first = 0; first < c.count; first += per_chunk) {
    const size_t n = std::min(per_chunk, c.count - first), bytes = n * size;
    if (c.kind != Kind::kBroadcast || comm->rank == c.root) {
      std::memcpy(mine, c.send + first * size, bytes);
    }
    if (Barrier(comm, c.what) != ncclSuccess) return;
    switch (c.kind) {
      case Kind::kAllReduce:
        Reduce(comm, c.type, c.op, n, c.recv + first * size);
        break;
      case Kind::kAllGather:
        for (int r = 0; r < comm->nranks; ++r) {
          std::memcpy(c.recv + (r * c.count + first) * size, comm->shared->slots[r], bytes);
        }
        break;
      case Kind::kBroadcast:
        std::memcpy(c.recv + first * size, comm->shared->slots[c.root], bytes);
        break;
    }
    if (Barrier(comm, c.what) != ncclSuccess) return;
  }
}

// Checks a collective's communicator, type and device buffers, then enqueues it.
ncclResult_t Enqueue(const Collective& c, ncclComm_t comm, cudaStream_t stream) {
  const std::string what = c.what;
  if (comm == nullptr) return Fail(ncclInvalidArgument, what + ": null communicator");
  if (comm->finalized) return Fail(ncclInvalidUsage, what + ": finalized communicator");
  if (comm->init_pending) return Fail(ncclInvalidUsage, what + ": init has not completed");
  if (comm->error != ncclSuccess) return comm->error;
  const size_t size = TypeSize(c.type);
  if (size == 0) return Fail(ncclInvalidArgument, what + ": unknown data type");
  if (c.type == ncclFloat16 && c.kind == Kind::kAllReduce) {
    return Fail(ncclInvalidArgument, what + ": fp16 reductions are not emulated");
  }
  if (c.root < 0 || c.root >= comm->nranks) {
    return Fail(ncclInvalidArgument, what + ": root " + std::to_string(c.root) +
                                         " outside the " + std::to_string(comm->nranks) + " ranks");
  }
  if (c.count == 0) return ncclSuccess;
  const size_t send_bytes = (c.kind == Kind::kBroadcast && comm->rank != c.root) ? 0 : c.count * size;
  const size_t recv_bytes = c.count * size * (c.kind == Kind::kAllGather ? comm->nranks : 1);
  if ((send_bytes > 0 && !IsDeviceMemory(c.send, send_bytes)) ||
      !IsDeviceMemory(c.recv, recv_bytes)) {
    return Fail(ncclInvalidArgument, what + ": a buffer is not device memory");
  }
  const cudaError_t err = EnqueueStreamWork(stream, [comm, c] { Run(comm, c); });
  return err == cudaSuccess ? ncclSuccess : Fail(ncclUnhandledCudaError, what + ": enqueueing");
}

// Unmaps the shared object and frees `comm`, leaving the name to the peers.
void Unmap(ncclComm* comm) {
  if (comm->shared != nullptr) munmap(comm->shared, sizeof(Shared));
  delete comm;
}

// Unmap, and unlinks the name (which may already be gone).
void Release(ncclComm* comm) {
  shm_unlink(comm->name.c_str());
  Unmap(comm);
}

// Whether every rank has joined; the name is unlinked then (the mappings stay), so
// nothing is left in /dev/shm once the communicator is up.
bool AllJoined(ncclComm* comm) {
  if (comm->shared->joined.load(std::memory_order_acquire) < comm->nranks) return false;
  shm_unlink(comm->name.c_str());
  return true;
}

}  // namespace
}  // namespace emu
}  // namespace tpserve

using tpserve::emu::Collective;
using tpserve::emu::Fail;
using tpserve::emu::Kind;

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) return Fail(ncclInvalidArgument, "ncclGetUniqueId: null id");
  static std::atomic<uint32_t> counter{0};
  const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
  const std::string name = std::string(tpserve::emu::kIdPrefix) + std::to_string(getpid()) + "-" +
                           std::to_string(counter.fetch_add(1)) + "-" + std::to_string(now);
  std::memset(id->internal, 0, sizeof(id->internal));
  std::memcpy(id->internal, name.data(), std::min(name.size(), sizeof(id->internal) - 1));
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t* config) {
  using tpserve::emu::kMaxRanks;
  using tpserve::emu::Shared;
  if (comm == nullptr) return Fail(ncclInvalidArgument, "ncclCommInitRankConfig: null comm");
  *comm = nullptr;
  if (nranks < 1 || nranks > kMaxRanks || rank < 0 || rank >= nranks) {
    return Fail(ncclInvalidArgument, "ncclCommInitRankConfig: rank " + std::to_string(rank) +
                                         " of " + std::to_string(nranks) +
                                         " (the emulator has 1 to " + std::to_string(kMaxRanks) +
                                         " ranks)");
  }
  const std::string name(id.internal, strnlen(id.internal, sizeof(id.internal)));
  if (name.rfind(tpserve::emu::kIdPrefix, 0) != 0) {
    return Fail(ncclInvalidArgument, "ncclCommInitRankConfig: not an id from ncclGetUniqueId");
  }
  const int fd = shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
  if (fd < 0) return Fail(ncclSystemError, "shm_open " + name + ": " + std::strerror(errno));
  // Every rank sizes it alike; the first one's ftruncate zero-fills it.
  void* mapped = MAP_FAILED;
  if (ftruncate(fd, sizeof(Shared)) == 0) {
    mapped = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  const int saved = errno;
  close(fd);
  auto* c = new ncclComm;
  c->rank = rank;
  c->nranks = nranks;
  c->blocking = config == nullptr || config->blocking != 0;
  c->name = name;
  c->init_start = std::chrono::steady_clock::now();
  if (mapped == MAP_FAILED) {
    tpserve::emu::Unmap(c);
    return Fail(ncclSystemError, "mapping " + name + ": " + std::strerror(saved));
  }
  c->shared = static_cast<Shared*>(mapped);
  int32_t expected = 0;
  if (!c->shared->nranks.compare_exchange_strong(expected, nranks) && expected != nranks) {
    tpserve::emu::Unmap(c);
    return Fail(ncclInvalidUsage, "ncclCommInitRankConfig: rank " + std::to_string(rank) +
                                      " says " + std::to_string(nranks) + " ranks, a peer said " +
                                      std::to_string(expected));
  }
  int32_t no_pid = 0;
  if (!c->shared->pids[rank].compare_exchange_strong(no_pid, getpid())) {
    tpserve::emu::Unmap(c);  // the name stays the first joiner's
    return Fail(ncclInvalidUsage,
                "ncclCommInitRankConfig: rank " + std::to_string(rank) + " joined twice");
  }
  c->shared->joined.fetch_add(1, std::memory_order_acq_rel);
  *comm = c;
  if (!c->blocking) {  // done at the first ncclCommGetAsyncError that finds all joined
    c->init_pending = true;
    return ncclInProgress;
  }
  const ncclResult_t joined = tpserve::emu::WaitUntil(
      c, "ncclCommInitRankConfig", c->init_start, [c] { return tpserve::emu::AllJoined(c); });
  return joined;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* state) {
  if (comm == nullptr || state == nullptr) {
    return Fail(ncclInvalidArgument, "ncclCommGetAsyncError: null argument");
  }
  if (comm->init_pending && comm->error == ncclSuccess) {
    // One look at the peers: joined, failed, or still in progress.
    std::string why;
    if (tpserve::emu::AllJoined(comm)) {
      comm->init_pending = false;
    } else if (const ncclResult_t failed = tpserve::emu::PeerFailure(comm, "init", &why);
               failed != ncclSuccess) {
      tpserve::emu::Break(comm, failed, why);
    } else if (std::chrono::steady_clock::now() >= comm->init_start + tpserve::emu::WaitTimeout()) {
      tpserve::emu::Break(comm, ncclSystemError, "init: not every rank joined in time");
    }
  }
  if (comm->error != ncclSuccess) {
    *state = comm->error;
  } else if (comm->init_pending) {
    *state = ncclInProgress;
  } else {
    *state = comm->finalize_pending ? ncclInProgress : ncclSuccess;
    comm->finalize_pending = false;  // a finalize is done once looked at
  }
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (comm == nullptr) return Fail(ncclInvalidArgument, "ncclCommFinalize: null comm");
  comm->finalized = true;
  if (comm->blocking) return ncclSuccess;
  comm->finalize_pending = true;
  return ncclInProgress;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm != nullptr) tpserve::emu::Release(comm);
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  // Peers waiting for this rank fail now rather than at their timeout.
  int32_t none = 0;
  comm->shared->aborted.compare_exchange_strong(none, comm->rank + 1);
  tpserve::emu::Release(comm);
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  if (op < ncclSum || op > ncclAvg) return Fail(ncclInvalidArgument, "ncclAllReduce: bad op");
  return tpserve::emu::Enqueue({Kind::kAllReduce, "ncclAllReduce",
                                static_cast<const unsigned char*>(send),
                                static_cast<unsigned char*>(recv), count, type, op, 0},
                               comm, stream);
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t type,
                           ncclComm_t comm, cudaStream_t stream) {
  return tpserve::emu::Enqueue({Kind::kAllGather, "ncclAllGather",
                                static_cast<const unsigned char*>(send),
                                static_cast<unsigned char*>(recv), count, type, ncclSum, 0},
                               comm, stream);
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t stream) {
  return tpserve::emu::Enqueue({Kind::kBroadcast, "ncclBroadcast",
                                static_cast<const unsigned char*>(send),
                                static_cast<unsigned char*>(recv), count, type, ncclSum, root},
                               comm, stream);
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (emulated)";
    case ncclSystemError: return "unhandled system error (emulated)";
    case ncclInternalError: return "internal error (emulated)";
    case ncclInvalidArgument: return "invalid argument (emulated)";
    case ncclInvalidUsage: return "invalid usage (emulated)";
    case ncclRemoteError: return "remote process exited or there was a network error (emulated)";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t) { return tpserve::emu::LastError().c_str(); }
