// The NCCL calls of worker/comm/nccl_comm_group.cc, defined for the CUDA emulator (emu.h)
// in place of libnccl, for a communicator of one rank: its collectives are copies (or
// nothing, in place), enqueued as stream work (stream_work.h) so that a capture records
// them. A communicator of more ranks, a non-zero root, a buffer outside device memory
// or a call on a finalized communicator fails as NCCL reports misuse. A non-blocking
// communicator's init returns ncclInProgress and completes at the first
// ncclCommGetAsyncError, so the caller's polling runs. Not modelled: more than one rank
// (no transport, no reduction across ranks), group calls, and every call the comm group
// does not make.
#include <nccl.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "worker/kernels/cuda/emu/stream_work.h"

struct ncclComm {
  bool blocking = true;
  bool finalized = false;
  ncclResult_t async_state = ncclSuccess;
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

size_t TypeSize(ncclDataType_t type) {
  switch (type) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
  }
}

// Checks a collective's communicator, type and device buffers, then enqueues the copy of
// `bytes` from send to recv (nothing when in place).
ncclResult_t Copy(const char* what, const void* send, void* recv, size_t count,
                  ncclDataType_t type, ncclComm_t comm, cudaStream_t stream) {
  if (comm == nullptr) return Fail(ncclInvalidArgument, std::string(what) + ": null communicator");
  if (comm->finalized) return Fail(ncclInvalidUsage, std::string(what) + ": finalized communicator");
  const size_t size = TypeSize(type);
  if (size == 0) return Fail(ncclInvalidArgument, std::string(what) + ": unknown data type");
  const size_t bytes = count * size;
  if (bytes == 0) return ncclSuccess;
  if (!IsDeviceMemory(send, bytes) || !IsDeviceMemory(recv, bytes)) {
    return Fail(ncclInvalidArgument, std::string(what) + ": a buffer is not device memory");
  }
  if (send == recv) return ncclSuccess;
  const cudaError_t err = EnqueueStreamWork(stream, [=] { std::memmove(recv, send, bytes); });
  return err == cudaSuccess ? ncclSuccess
                            : Fail(ncclUnhandledCudaError, std::string(what) + ": enqueueing");
}

}  // namespace
}  // namespace emu
}  // namespace tpserve

using tpserve::emu::Fail;

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) return Fail(ncclInvalidArgument, "ncclGetUniqueId: null id");
  std::memset(id->internal, 0, sizeof(id->internal));
  std::strncpy(id->internal, "tpserve-emu", sizeof(id->internal));
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId, int rank,
                                    ncclConfig_t* config) {
  if (comm == nullptr) return Fail(ncclInvalidArgument, "ncclCommInitRankConfig: null comm");
  *comm = nullptr;
  if (nranks != 1 || rank != 0) {
    return Fail(ncclInvalidUsage, "ncclCommInitRankConfig: the emulator has one rank only, got " +
                                      std::to_string(nranks) + " ranks");
  }
  *comm = new ncclComm;
  (*comm)->blocking = config == nullptr || config->blocking != 0;
  if ((*comm)->blocking) return ncclSuccess;
  (*comm)->async_state = ncclInProgress;
  return ncclInProgress;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* state) {
  if (comm == nullptr || state == nullptr) {
    return Fail(ncclInvalidArgument, "ncclCommGetAsyncError: null argument");
  }
  *state = comm->async_state;
  comm->async_state = ncclSuccess;  // a pending init or finalize is done once looked at
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (comm == nullptr) return Fail(ncclInvalidArgument, "ncclCommFinalize: null comm");
  comm->finalized = true;
  if (comm->blocking) return ncclSuccess;
  comm->async_state = ncclInProgress;
  return ncclInProgress;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  if (op < ncclSum || op > ncclAvg) return Fail(ncclInvalidArgument, "ncclAllReduce: bad op");
  return tpserve::emu::Copy("ncclAllReduce", send, recv, count, type, comm, stream);
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t type,
                           ncclComm_t comm, cudaStream_t stream) {
  return tpserve::emu::Copy("ncclAllGather", send, recv, count, type, comm, stream);
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t stream) {
  if (root != 0) return Fail(ncclInvalidArgument, "ncclBroadcast: root outside the one rank");
  return tpserve::emu::Copy("ncclBroadcast", send, recv, count, type, comm, stream);
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
