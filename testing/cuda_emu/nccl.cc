// The NCCL calls of worker/comm/nccl_comm_group.cc, defined for the CUDA emulator (emu.h)
// in place of libnccl, for communicators of 1 to kMaxRanks ranks, each rank a process on
// this host (as the worker pool runs them), meeting through nccl_transport.h.
//
// A collective is stream work (stream_work.h): it runs at the call, or at each replay of
// a graph that captured it, blocking the host thread until its peers arrive, as a device
// would block the stream. Failure, as the comm group sees it from NCCL: a rank that
// aborts, or a peer process that exits, makes every peer waiting at a barrier or an init
// fail with ncclRemoteError at once; a peer that is alive but never arrives fails the wait
// with ncclSystemError after TPSERVE_EMU_NCCL_TIMEOUT_S seconds (default 60), where a real
// device would hang until aborted (the host thread is the one waiting here, so nothing
// else could abort). Errors are the communicator's async error (ncclCommGetAsyncError)
// from then on, and every later collective returns it. A non-blocking communicator's init
// returns ncclInProgress and completes at an ncclCommGetAsyncError once every rank has
// joined.
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
#include <cstring>
#include <string>

#include "testing/cuda_emu/nccl_transport.h"
#include "testing/cuda_emu/stream_work.h"

namespace tpserve {
namespace emu {
namespace {

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
      // The last peer may have joined and then exited since AllJoined was asked.
      if (tpserve::emu::AllJoined(comm)) {
        comm->init_pending = false;
      } else {
        tpserve::emu::Break(comm, failed, why);
      }
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
