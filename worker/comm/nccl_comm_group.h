// NcclCommGroup: the CommGroup of GPU ranks, one process per GPU, over NCCL.
//
// Created by the rank's worker process, once per pool generation, on the thread that
// runs the model (the compute thread), and handed to the parallel layers. Two faces:
//  - Device collectives (AllReduceSumDevice, AllGatherDevice) are enqueued on the
//    compute stream given to Create(), between the model's kernels, and return without
//    waiting for the GPU. WaitStream() is where the host learns whether they, and
//    everything before them on the stream, finished.
//  - The CommGroup host-span API, so code written against CommGroup runs unchanged: each
//    call stages the data through device and pinned buffers kept by the group and
//    waits for it with WaitStream(timeout).
//
// Create(): cudaSetDevice(device) on the calling thread; rank 0 publishes
// ncclGetUniqueId() in the coordinator's StoreServer under prefix + "nccl_unique_id" and
// the other ranks wait for it; then every rank initialises a non-blocking communicator.
// The whole of Create() is bounded by connect_timeout (plus TcpStoreClient's reply
// margin, should the store accept a connection and then stop answering). The store is
// used at every size, so a single GPU exercises the same path as a pool.
//
// Failure contract (the same as GlooCommGroup's): every NCCL and CUDA return code is
// checked. An NCCL error, a CUDA error on the stream, or a deadline passing (`timeout`
// for an enqueue and for a host-span call, the caller's for WaitStream) aborts the
// communicator (ncclCommAbort, which also ends kernels stuck waiting for a peer) and
// breaks the group: that call returns INTERNAL or DEADLINE_EXCEEDED naming the rank, the
// operation and NCCL's error text, and every later call returns FAILED_PRECONDITION
// naming that first error. Peers are not told; they fail at their own deadline or are
// ended by the pool supervisor, and the pool is rebuilt under a new prefix. Caller
// errors (null pointers, mismatched sizes) are INVALID_ARGUMENT and leave the group
// usable. The destructor waits for the stream (bounded by `timeout`), then finalises and
// destroys the communicator; a broken group, or a finalise that overruns, is aborted
// instead, so destruction never hangs.
//
// Threads: one thread at a time, whose current CUDA device is `device` (Create() sets it
// on the thread that calls it). The stream belongs to the caller and must outlive the
// group.
#ifndef TPSERVE_WORKER_COMM_NCCL_COMM_GROUP_H_
#define TPSERVE_WORKER_COMM_NCCL_COMM_GROUP_H_

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "worker/comm/comm_group.h"
#include "worker/cuda/device_buffer.h"
#include "worker/cuda/device_dtype.h"
#include "worker/cuda/pinned_buffer.h"

namespace tpserve {

// The store key (after the prefix) that carries rank 0's ncclUniqueId.
inline constexpr char kNcclUniqueIdKey[] = "nccl_unique_id";

struct NcclOptions {
  int rank = 0;
  int size = 1;
  // The CUDA device ordinal this rank drives.
  int device = 0;
  std::string store_host = "127.0.0.1";
  int store_port = 0;
  // Prepended verbatim to the store keys (end it with '/'); a fresh one per pool
  // generation, e.g. "tpserve/gen3/".
  std::string prefix;
  // Bounds each enqueue and each host-span call.
  absl::Duration timeout = absl::Seconds(30);
  // Bounds Create(): the id exchange and the communicator's init, which waits for every
  // peer. Longer than `timeout`, since peers start at different times.
  absl::Duration connect_timeout = absl::Seconds(60);

  // INVALID_ARGUMENT naming the field that is out of range.
  absl::Status Validate() const;
};

// OK for ncclSuccess, else INTERNAL "what: <ncclGetErrorString> (last NCCL error: ...)".
// ncclInProgress is not an error for a non-blocking communicator; callers handle it
// before converting. Any thread.
absl::Status NcclStatus(ncclResult_t result, absl::string_view what);

// Create()'s rendezvous: rank 0 generates the id and publishes it under
// options.prefix + kNcclUniqueIdKey; every other rank waits for it, DEADLINE_EXCEEDED at
// `deadline`. Ranks other than 0 touch neither CUDA nor NCCL here.
absl::StatusOr<ncclUniqueId> ExchangeNcclUniqueId(const NcclOptions& options, absl::Time deadline);

class NcclCommGroup : public CommGroup {
 public:
  static absl::StatusOr<std::unique_ptr<NcclCommGroup>> Create(const NcclOptions& options,
                                                               cudaStream_t stream);
  // The same on a non-blocking stream that the group creates and destroys last, for
  // owners (a rank) that want the stream to live exactly as long as the group.
  static absl::StatusOr<std::unique_ptr<NcclCommGroup>> CreateWithOwnStream(
      const NcclOptions& options);
  ~NcclCommGroup() override;
  NcclCommGroup(const NcclCommGroup&) = delete;
  NcclCommGroup& operator=(const NcclCommGroup&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  cudaStream_t stream() const { return stream_; }

  // In place on the device: data[i] = Σ over ranks of data[i]; data: [count] of dtype.
  // Enqueued on stream(); returns without waiting for the GPU.
  absl::Status AllReduceSumDevice(void* data, size_t count, DeviceDType dtype);
  // out = concat over ranks (in rank order) of each rank's `in`; in: [count_per_rank],
  // out: [size() · count_per_rank], both of dtype. In place when
  // in == out + rank() · count_per_rank elements. Enqueued; returns without waiting.
  absl::Status AllGatherDevice(const void* in, void* out, size_t count_per_rank, DeviceDType dtype);
  // Waits until everything enqueued on stream() so far has finished. On a CUDA error,
  // an NCCL async error, or `timeout` passing, aborts the communicator and breaks the
  // group. `timeout` must be positive.
  absl::Status WaitStream(absl::Duration timeout);

  // CommGroup, on host memory; each call waits for the stream (see the header comment).
  absl::Status AllReduceSum(absl::Span<float> data) override;
  absl::Status AllGather(absl::Span<const float> in, absl::Span<float> out) override;
  absl::Status Broadcast(absl::Span<uint8_t> data, int root) override;
  absl::Status Barrier() override;

 private:
  NcclCommGroup(int rank, int size, cudaStream_t stream, ncclComm_t comm, absl::Duration timeout);

  // Finalises and destroys the communicator (aborts it when broken); never hangs.
  void Teardown();
  // OK, or FAILED_PRECONDITION naming `what` once the group is broken.
  absl::Status Usable(absl::string_view what) const;
  // Breaks the group with `status` (prefixed with the rank) and aborts the communicator.
  absl::Status Fail(const absl::Status& status);
  // Turns the result of an enqueue into a status: waits (bounded by timeout_) until a
  // non-blocking enqueue has settled, and breaks the group on an error or the deadline.
  absl::Status Settle(ncclResult_t enqueued, absl::string_view what);
  // WaitStream without the argument check; `what` names the operation in errors.
  absl::Status Wait(absl::Duration timeout, absl::string_view what);
  // Grows the staging buffers to at least `bytes`.
  absl::Status ReserveStaging(size_t bytes);
  // Copies `in` into the device staging buffer at byte `offset`, runs `collective` on
  // the buffer, copies its first out.size() bytes into `out`, waiting (timeout_) for all.
  absl::Status RunStaged(absl::string_view what, absl::Span<const uint8_t> in, size_t offset,
                         size_t staged_bytes, absl::Span<uint8_t> out,
                         absl::FunctionRef<ncclResult_t(void* staged)> collective);

  const int rank_;
  const int size_;
  const cudaStream_t stream_;
  cudaStream_t owned_stream_ = nullptr;  // == stream_ when CreateWithOwnStream made it
  ncclComm_t comm_;  // Null once aborted or destroyed.
  const absl::Duration timeout_;
  absl::Status broken_;  // The failure that broke the group, if any.
  // Staging for the host-span API, grown on demand; both hold staging_bytes_.
  DeviceBuffer staging_device_;
  PinnedBuffer staging_host_;
  size_t staging_bytes_ = 0;
};

}  // namespace tpserve

#endif  // TPSERVE_WORKER_COMM_NCCL_COMM_GROUP_H_
