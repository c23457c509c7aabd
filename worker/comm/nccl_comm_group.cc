#include "worker/comm/nccl_comm_group.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "rendezvous/tcp_store.h"
#include "spdlog/spdlog.h"
#include "worker/cuda/cuda_status.h"

namespace tpserve {
namespace {

// Polls between checks of the GPU: yields at first (a decode step's collective ends in
// microseconds), then sleeps for doubling intervals up to kMaxSleep, so a long wait
// costs little CPU and adds at most kMaxSleep of latency.
class PollBackoff {
 public:
  void Wait() {
    if (spins_ < kSpins) {
      ++spins_;
      std::this_thread::yield();
      return;
    }
    absl::SleepFor(sleep_);
    sleep_ = std::min(2 * sleep_, kMaxSleep);
  }

 private:
  static constexpr int kSpins = 64;
  // A step's end is noticed at most this late: small beside a decode step of a few ms.
  static constexpr absl::Duration kMaxSleep = absl::Microseconds(20);
  int spins_ = 0;
  absl::Duration sleep_ = absl::Microseconds(5);
};

// Polls a non-blocking communicator until its state is no longer ncclInProgress, or
// `deadline` passes (then returns ncclInProgress). A failing query is returned as such.
ncclResult_t AwaitComm(ncclComm_t comm, absl::Time deadline) {
  for (PollBackoff backoff;; backoff.Wait()) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t query = ncclCommGetAsyncError(comm, &state);
    if (query != ncclSuccess) return query;
    if (state != ncclInProgress || absl::Now() >= deadline) return state;
  }
}

ncclDataType_t NcclType(DeviceDType dtype) {
  return dtype == DeviceDType::kBFloat16 ? ncclBfloat16 : ncclFloat32;
}

absl::Status CheckDType(DeviceDType dtype) {
  if (DeviceDTypeSize(dtype) != 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("unknown DeviceDType ", static_cast<int>(dtype)));
}

std::string RankName(int rank, int size) { return absl::StrCat("rank ", rank, " of ", size); }

absl::Status WithRank(const absl::Status& status, int rank, int size) {
  return absl::Status(status.code(), absl::StrCat(RankName(rank, size), ": ", status.message()));
}

// Aborts `comm` (a non-blocking abort may finish in the background) and returns
// `failure`, noting a failing abort in it.
absl::Status Abort(ncclComm_t comm, const absl::Status& failure) {
  const ncclResult_t aborted = ncclCommAbort(comm);
  if (aborted == ncclSuccess || aborted == ncclInProgress) return failure;
  return absl::Status(
      failure.code(),
      absl::StrCat(failure.message(), "; ncclCommAbort: ", ncclGetErrorString(aborted)));
}

}  // namespace

absl::Status NcclStatus(ncclResult_t result, absl::string_view what) {
  if (result == ncclSuccess) return absl::OkStatus();
  const char* last = ncclGetLastError(nullptr);
  return absl::InternalError(absl::StrCat(
      what, ": ", ncclGetErrorString(result),
      last != nullptr && *last != '\0' ? absl::StrCat(" (last NCCL error: ", last, ")") : ""));
}

absl::Status NcclOptions::Validate() const {
  if (size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("NcclOptions.size must be >= 1, got ", size));
  }
  if (rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("NcclOptions.rank ", rank, " outside [0, size ", size, ")"));
  }
  if (device < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("NcclOptions.device must be >= 0, got ", device));
  }
  if (store_host.empty()) return absl::InvalidArgumentError("NcclOptions.store_host is empty");
  if (store_port <= 0 || store_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("NcclOptions.store_port ", store_port, " outside [1, 65535]"));
  }
  if (prefix.empty()) {
    return absl::InvalidArgumentError(
        "NcclOptions.prefix is empty; use a fresh one per pool generation");
  }
  if (timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("NcclOptions.timeout must be positive, got ", absl::FormatDuration(timeout)));
  }
  if (connect_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("NcclOptions.connect_timeout must be positive, got ",
                     absl::FormatDuration(connect_timeout)));
  }
  return absl::OkStatus();
}

absl::StatusOr<ncclUniqueId> ExchangeNcclUniqueId(const NcclOptions& options, absl::Time deadline) {
  const std::string key = options.prefix + kNcclUniqueIdKey;
  TPSERVE_ASSIGN_OR_RETURN(
      std::unique_ptr<TcpStoreClient> store,
      TcpStoreClient::Connect(options.store_host, options.store_port,
                              std::max(deadline - absl::Now(), absl::ZeroDuration()),
                              ProcessWorkerToken()));
  ncclUniqueId id;
  if (options.rank == 0) {
    TPSERVE_RETURN_IF_ERROR(NcclStatus(ncclGetUniqueId(&id), "ncclGetUniqueId"));
    if (absl::Status s = store->Set(key, absl::string_view(id.internal, sizeof(id.internal)));
        !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("publishing ", key, ": ", s.message()));
    }
    return id;
  }
  absl::StatusOr<std::string> value =
      store->Get(key, std::max(deadline - absl::Now(), absl::ZeroDuration()));
  if (!value.ok()) {
    return absl::Status(value.status().code(), absl::StrCat("waiting for rank 0 to publish ", key,
                                                            ": ", value.status().message()));
  }
  if (value->size() != sizeof(id.internal)) {
    return absl::InternalError(
        absl::StrCat(key, " holds ", value->size(), " bytes, want ", sizeof(id.internal)));
  }
  std::memcpy(id.internal, value->data(), sizeof(id.internal));
  return id;
}

absl::StatusOr<std::unique_ptr<NcclCommGroup>> NcclCommGroup::Create(const NcclOptions& options,
                                                                     cudaStream_t stream) {
  TPSERVE_RETURN_IF_ERROR(options.Validate());
  const int rank = options.rank, size = options.size;
  const absl::Time deadline = absl::Now() + options.connect_timeout;
  // The device comes first: a rank without one must say so, not wait for its peers.
  if (absl::Status s = CudaDeviceAvailable(); !s.ok()) return WithRank(s, rank, size);
  if (absl::Status s = CudaStatus(cudaSetDevice(options.device),
                                  absl::StrCat("cudaSetDevice(", options.device, ")"));
      !s.ok()) {
    return WithRank(s, rank, size);
  }
  absl::StatusOr<ncclUniqueId> id = ExchangeNcclUniqueId(options, deadline);
  if (!id.ok()) return WithRank(id.status(), rank, size);

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // So that a missing peer cannot block us past the deadline.
  ncclComm_t comm = nullptr;
  ncclResult_t state = ncclCommInitRankConfig(&comm, size, *id, rank, &config);
  if (comm == nullptr && state == ncclSuccess) state = ncclInternalError;  // No handle.
  if ((state == ncclSuccess || state == ncclInProgress) && comm != nullptr) {
    state = AwaitComm(comm, deadline);
  }
  if (state == ncclSuccess) {
    return std::unique_ptr<NcclCommGroup>(
        new NcclCommGroup(rank, size, stream, comm, options.timeout));
  }
  absl::Status failure =
      state == ncclInProgress
          ? absl::DeadlineExceededError(absl::StrCat(
                "ncclCommInitRankConfig did not complete within connect_timeout ",
                absl::FormatDuration(options.connect_timeout), " (are all ", size, " ranks up?)"))
          : NcclStatus(state, "ncclCommInitRankConfig");
  if (comm != nullptr) failure = Abort(comm, failure);
  return WithRank(failure, rank, size);
}

NcclCommGroup::NcclCommGroup(int rank, int size, cudaStream_t stream, ncclComm_t comm,
                             absl::Duration timeout)
    : rank_(rank), size_(size), stream_(stream), comm_(comm), timeout_(timeout) {}

absl::StatusOr<std::unique_ptr<NcclCommGroup>> NcclCommGroup::CreateWithOwnStream(
    const NcclOptions& options) {
  TPSERVE_RETURN_IF_ERROR(options.Validate());
  if (absl::Status s = CudaDeviceAvailable(); !s.ok()) {
    return WithRank(s, options.rank, options.size);
  }
  cudaStream_t stream = nullptr;
  absl::Status s = CudaStatus(cudaSetDevice(options.device), "cudaSetDevice");
  if (s.ok()) {
    s = CudaStatus(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  if (!s.ok()) return WithRank(s, options.rank, options.size);
  absl::StatusOr<std::unique_ptr<NcclCommGroup>> group = Create(options, stream);
  if (!group.ok()) {
    cudaStreamDestroy(stream);
    return group.status();
  }
  (*group)->owned_stream_ = stream;
  return group;
}

NcclCommGroup::~NcclCommGroup() {
  Teardown();
  if (owned_stream_ != nullptr) cudaStreamDestroy(owned_stream_);
}

void NcclCommGroup::Teardown() {
  if (comm_ == nullptr) return;                     // Aborted when it broke.
  if (!Wait(timeout_, "destruction").ok()) return;  // Wait has aborted the communicator.
  // A destructor has no caller to tell, so failures go where an operator sees them.
  ncclResult_t state = ncclCommFinalize(comm_);
  if (state == ncclSuccess || state == ncclInProgress) {
    state = AwaitComm(comm_, absl::Now() + timeout_);
  }
  if (state != ncclSuccess) {
    spdlog::warn("{}: ncclCommFinalize: {}; aborting the communicator", RankName(rank_, size_),
                 state == ncclInProgress ? "timed out" : ncclGetErrorString(state));
    state = ncclCommAbort(comm_);
  } else {
    state = ncclCommDestroy(comm_);
  }
  comm_ = nullptr;
  // A non-blocking communicator may finish freeing itself in the background.
  if (state != ncclSuccess && state != ncclInProgress) {
    spdlog::warn("{}: NCCL teardown: {}", RankName(rank_, size_), ncclGetErrorString(state));
  }
}

absl::Status NcclCommGroup::Usable(absl::string_view what) const {
  if (broken_.ok()) return broken_;
  return absl::FailedPreconditionError(
      absl::StrCat(what, " on a broken comm group: ", broken_.message()));
}

absl::Status NcclCommGroup::Fail(const absl::Status& status) {
  broken_ = WithRank(status, rank_, size_);
  if (comm_ != nullptr) broken_ = Abort(std::exchange(comm_, nullptr), broken_);
  return broken_;
}

absl::Status NcclCommGroup::Settle(ncclResult_t enqueued, absl::string_view what) {
  ncclResult_t state = enqueued;
  if (state == ncclSuccess || state == ncclInProgress) {
    state = AwaitComm(comm_, absl::Now() + timeout_);
  }
  if (state == ncclSuccess) return absl::OkStatus();
  if (state == ncclInProgress) {
    return Fail(absl::DeadlineExceededError(
        absl::StrCat(what, " was not enqueued within timeout ", absl::FormatDuration(timeout_))));
  }
  return Fail(NcclStatus(state, what));
}

absl::Status NcclCommGroup::WaitStream(absl::Duration timeout) {
  if (timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("WaitStream timeout must be positive, got ", absl::FormatDuration(timeout)));
  }
  return Wait(timeout, "WaitStream");
}

absl::Status NcclCommGroup::Wait(absl::Duration timeout, absl::string_view what) {
  TPSERVE_RETURN_IF_ERROR(Usable(what));
  const absl::Time deadline = absl::Now() + timeout;
  for (PollBackoff backoff;; backoff.Wait()) {
    const cudaError_t query = cudaStreamQuery(stream_);
    if (query != cudaSuccess && query != cudaErrorNotReady) {
      return Fail(CudaStatus(query, absl::StrCat(what, ": cudaStreamQuery")));
    }
    ncclResult_t state = ncclSuccess;
    const ncclResult_t got = ncclCommGetAsyncError(comm_, &state);
    if (got != ncclSuccess) {
      return Fail(NcclStatus(got, absl::StrCat(what, ": ncclCommGetAsyncError")));
    }
    if (state != ncclSuccess && state != ncclInProgress) {
      return Fail(NcclStatus(state, absl::StrCat(what, ": NCCL async error")));
    }
    if (query == cudaSuccess && state == ncclSuccess) return absl::OkStatus();
    if (absl::Now() >= deadline) {
      return Fail(absl::DeadlineExceededError(
          absl::StrCat(what, ": the stream did not finish within ", absl::FormatDuration(timeout),
                       " (a peer missing a collective?)")));
    }
  }
}

absl::Status NcclCommGroup::AllReduceSumDevice(void* data, size_t count, DeviceDType dtype) {
  TPSERVE_RETURN_IF_ERROR(CheckDType(dtype));
  if (count > 0 && data == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("device all-reduce of ", count, " elements at a null pointer"));
  }
  if (absl::Status s = Usable("device all-reduce"); !s.ok() || count == 0) return s;
  return Settle(ncclAllReduce(data, data, count, NcclType(dtype), ncclSum, comm_, stream_),
                "ncclAllReduce (device)");
}

absl::Status NcclCommGroup::AllGatherDevice(const void* in, void* out, size_t count_per_rank,
                                            DeviceDType dtype) {
  TPSERVE_RETURN_IF_ERROR(CheckDType(dtype));
  if (count_per_rank > 0 && (in == nullptr || out == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrCat("device all-gather of ", count_per_rank, " elements with a null pointer"));
  }
  if (absl::Status s = Usable("device all-gather"); !s.ok() || count_per_rank == 0) return s;
  return Settle(ncclAllGather(in, out, count_per_rank, NcclType(dtype), comm_, stream_),
                "ncclAllGather (device)");
}

absl::Status NcclCommGroup::ReserveStaging(size_t bytes) {
  if (bytes <= staging_bytes_) return absl::OkStatus();
  // Freeing device memory can synchronise the device; make sure nothing is pending so
  // that it cannot block on a hung collective.
  TPSERVE_RETURN_IF_ERROR(Wait(timeout_, "growing the staging buffers"));
  staging_device_ = DeviceBuffer();
  staging_host_ = PinnedBuffer();
  staging_bytes_ = 0;
  absl::StatusOr<DeviceBuffer> device = DeviceBuffer::Create(bytes);
  if (!device.ok()) return WithRank(device.status(), rank_, size_);
  absl::StatusOr<PinnedBuffer> host = PinnedBuffer::Create(bytes);
  if (!host.ok()) return WithRank(host.status(), rank_, size_);
  staging_device_ = *std::move(device);
  staging_host_ = *std::move(host);
  staging_bytes_ = bytes;
  return absl::OkStatus();
}

absl::Status NcclCommGroup::RunStaged(absl::string_view what, absl::Span<const uint8_t> in,
                                      size_t offset, size_t staged_bytes, absl::Span<uint8_t> out,
                                      absl::FunctionRef<ncclResult_t(void* staged)> collective) {
  TPSERVE_RETURN_IF_ERROR(Usable(what));
  TPSERVE_RETURN_IF_ERROR(ReserveStaging(staged_bytes));
  uint8_t* device = staging_device_.as<uint8_t>();
  uint8_t* host = staging_host_.as<uint8_t>();
  if (!in.empty()) {
    std::memcpy(host + offset, in.data(), in.size());
    if (absl::Status s = CudaStatus(cudaMemcpyAsync(device + offset, host + offset, in.size(),
                                                    cudaMemcpyHostToDevice, stream_),
                                    "cudaMemcpyAsync (staging in)");
        !s.ok()) {
      return Fail(s);
    }
  }
  TPSERVE_RETURN_IF_ERROR(Settle(collective(device), what));
  if (!out.empty()) {
    if (absl::Status s =
            CudaStatus(cudaMemcpyAsync(host, device, out.size(), cudaMemcpyDeviceToHost, stream_),
                       "cudaMemcpyAsync (staging out)");
        !s.ok()) {
      return Fail(s);
    }
  }
  TPSERVE_RETURN_IF_ERROR(Wait(timeout_, what));
  if (!out.empty()) std::memcpy(out.data(), host, out.size());
  return absl::OkStatus();
}

absl::Status NcclCommGroup::AllReduceSum(absl::Span<float> data) {
  if (data.empty()) return Usable("all-reduce");
  const size_t bytes = data.size() * sizeof(float);
  auto* raw = reinterpret_cast<uint8_t*>(data.data());
  return RunStaged("ncclAllReduce (host)", absl::MakeConstSpan(raw, bytes), 0, bytes,
                   absl::MakeSpan(raw, bytes), [&](void* staged) {
                     return ncclAllReduce(staged, staged, data.size(), ncclFloat32, ncclSum, comm_,
                                          stream_);
                   });
}

absl::Status NcclCommGroup::AllGather(absl::Span<const float> in, absl::Span<float> out) {
  if (out.size() != in.size() * size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("all-gather output has ", out.size(), " elements, want size() · ", in.size()));
  }
  if (in.empty()) return Usable("all-gather");
  const size_t in_bytes = in.size() * sizeof(float), out_bytes = out.size() * sizeof(float);
  // In place: this rank's part already sits where the gather puts it.
  return RunStaged("ncclAllGather (host)",
                   absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(in.data()), in_bytes),
                   rank_ * in_bytes, out_bytes,
                   absl::MakeSpan(reinterpret_cast<uint8_t*>(out.data()), out_bytes),
                   [&](void* staged) {
                     return ncclAllGather(static_cast<uint8_t*>(staged) + rank_ * in_bytes, staged,
                                          in.size(), ncclFloat32, comm_, stream_);
                   });
}

absl::Status NcclCommGroup::Broadcast(absl::Span<uint8_t> data, int root) {
  if (root < 0 || root >= size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("broadcast root ", root, " outside [0, ", size_, ")"));
  }
  if (data.empty()) return Usable("broadcast");
  // Only the root's bytes need to travel to the device; the others are overwritten.
  const absl::Span<const uint8_t> in =
      rank_ == root ? absl::Span<const uint8_t>(data) : absl::Span<const uint8_t>();
  return RunStaged("ncclBroadcast (host)", in, 0, data.size(), data, [&](void* staged) {
    return ncclBroadcast(staged, staged, data.size(), ncclUint8, root, comm_, stream_);
  });
}

absl::Status NcclCommGroup::Barrier() {
  // NCCL has no barrier; a one-element all-reduce that every rank must join is one.
  return RunStaged("barrier (ncclAllReduce of 1)", {}, 0, sizeof(float), {}, [&](void* staged) {
    return ncclAllReduce(staged, staged, 1, ncclFloat32, ncclSum, comm_, stream_);
  });
}

}  // namespace tpserve
