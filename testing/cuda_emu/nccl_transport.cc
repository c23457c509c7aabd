#include "testing/cuda_emu/nccl_transport.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/spin_wait.h"
#include "base/subprocess.h"

namespace tpserve {
namespace emu {
namespace {

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

}  // namespace

std::string& LastError() {
  static std::string* last = new std::string;
  return *last;
}

ncclResult_t Fail(ncclResult_t result, const std::string& why) {
  LastError() = why;
  std::fprintf(stderr, "emu: NCCL: %s\n", why.c_str());
  return result;
}

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

ncclResult_t PeerFailure(ncclComm* comm, const char* what, std::string* why) {
  Shared* s = comm->shared;
  if (const int32_t aborted = s->aborted.load(std::memory_order_acquire); aborted != 0) {
    *why = std::string(what) + ": rank " + std::to_string(aborted - 1) + " aborted the communicator";
    return ncclRemoteError;
  }
  for (int r = 0; r < comm->nranks; ++r) {
    const int32_t pid = s->pids[r].load(std::memory_order_acquire);
    if (r != comm->rank && pid != 0 && ProcessHasExited(pid)) {
      *why = std::string(what) + ": rank " + std::to_string(r) + " (pid " + std::to_string(pid) +
             ") exited";
      return ncclRemoteError;
    }
  }
  return ncclSuccess;
}

ncclResult_t WaitUntil(ncclComm* comm, const char* what, std::chrono::steady_clock::time_point start,
                       const std::function<bool()>& done) {
  return WaitUntil(comm, what, start, done,
                   [comm, what](std::string* why) { return PeerFailure(comm, what, why); });
}

ncclResult_t WaitUntil(ncclComm* comm, const char* what,
                       std::chrono::steady_clock::time_point start,
                       const std::function<bool()>& done,
                       const std::function<ncclResult_t(std::string* why)>& peer_failure) {
  const auto deadline = start + WaitTimeout();
  ncclResult_t failed = ncclSuccess;
  SpinWaitOptions options;
  options.spins = 0;
  options.yields = 256;
  options.check_every = absl::Milliseconds(3);  // the checks read /proc
  const absl::Status waited = SpinWait(
      done,
      [&]() -> absl::Status {
        std::string why;
        failed = peer_failure(&why);
        if (failed == ncclSuccess && std::chrono::steady_clock::now() >= deadline) {
          failed = ncclSystemError;
          why = std::string(what) + ": a peer did not arrive within TPSERVE_EMU_NCCL_TIMEOUT_S (" +
                std::to_string(WaitTimeout().count()) + " s)";
        }
        return failed == ncclSuccess ? absl::OkStatus() : absl::UnavailableError(why);
      },
      options);
  if (waited.ok()) return ncclSuccess;
  Break(comm, failed, std::string(waited.message()));
  return failed;
}

namespace {

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

}  // namespace

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

void Unmap(ncclComm* comm) {
  if (comm->shared != nullptr) munmap(comm->shared, sizeof(Shared));
  delete comm;
}

void Release(ncclComm* comm) {
  shm_unlink(comm->name.c_str());
  Unmap(comm);
}

bool AllJoined(ncclComm* comm) {
  if (comm->shared->joined.load(std::memory_order_acquire) < comm->nranks) return false;
  shm_unlink(comm->name.c_str());
  return true;
}

}  // namespace emu
}  // namespace tpserve
