// GlooCommGroup: the CommGroup of CPU ranks, one process per rank, over Gloo's TCP
// transport.
//
// Create() connects this rank to every peer (a full mesh), exchanging addresses
// through the coordinator's StoreServer under `prefix`; it returns once all `size`
// ranks of the same prefix have joined, or fails after `connect_timeout`. Each
// collective is bounded by `timeout`: a peer that dies makes it fail as soon as the socket
// reports it, a peer that hangs makes it fail at the timeout. After any collective
// fails, the group closes its connections (so peers fail fast as well) and every
// later call returns FAILED_PRECONDITION: the pool must be rebuilt under a new prefix.
// A size-1 group needs no store and no Gloo. Used by one thread at a time.
//
// Ranks on one host (every rank can open a shared-memory segment rank 0 creates, found
// out in Create()) run all-gathers and all-reduces of every size through ShmAllGather
// instead of TCP, shm_slot_bytes per rank at a time: a decode step's collectives are
// latency-bound, and a loopback round trip with Gloo's thread wake-ups costs hundreds of
// µs, while a prefill step's are megabytes, which the TCP ring copies through the kernel
// 2·(T − 1) times (docs/perf.md). Without shared memory, small all-reduces (up to
// gather_reduce_max_floats in all) are an all-gather plus a local sum in rank order —
// the same bits as the shared-memory sum — and larger ones Gloo's ring, as are
// broadcasts and barriers. Shared-memory failures break the group like Gloo's.
//
// Ranks on several hosts, some of them with more than one rank (Create() groups the
// ranks by host identity — boot id, /dev/shm's device, IPC namespace — and checks that
// each host's ranks can open one segment), keep shared memory within each host and use
// TCP between hosts only: an all-gather is a gather within each host, an exchange of the
// hosts' blocks between each host's lowest rank (its leader) over Gloo, and the
// leader's broadcast of the whole result within its host; a small all-reduce (up to
// gather_reduce_max_floats in all) is that all-gather and a local sum in rank order, the
// bits a single host gives, and a larger one a sum within each host, the hosts' sums
// exchanged by the leaders and added in host order, and the leader's broadcast (every
// rank gets the same bits, moving n floats between hosts instead of n per rank).
// Broadcasts and barriers stay on Gloo. If any host's ranks cannot share a segment,
// every collective uses TCP.
//
// Create() sets SIGPIPE to ignored if it is at its default: Gloo writes to sockets
// with writev(), and a peer that has gone must show up as an error, not kill us.
#ifndef TPSERVE_WORKER_COMM_GLOO_COMM_GROUP_H_
#define TPSERVE_WORKER_COMM_GLOO_COMM_GROUP_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/comm/comm_group.h"
#include "worker/comm/shm_all_gather.h"

namespace gloo {
class Context;
}  // namespace gloo

namespace tpserve {

struct GlooOptions {
  int rank = 0;
  int size = 1;
  std::string store_host = "127.0.0.1";
  int store_port = 0;
  // Namespaces the rendezvous keys; use a fresh one per pool generation.
  std::string prefix;
  // The address this rank's Gloo sockets bind to; peers connect to it. "": the local
  // address this host routes to the store from (rendezvous/net_socket.h
  // LocalAddressToward), so ranks on other hosts reach it the way they reach the store,
  // and a loopback store keeps everything on loopback.
  std::string bind_host;
  // A network interface whose address to bind instead (GLOO_SOCKET_IFNAME's meaning).
  std::string bind_interface;
  // Bounds each collective.
  absl::Duration timeout = absl::Seconds(30);
  // Bounds Create(): how long to wait for every peer to join. Longer than `timeout`,
  // since peers start (and load weights) at different times.
  absl::Duration connect_timeout = absl::Seconds(60);
  // All-reduces of up to this many floats in all (payload × ranks) run as one
  // all-gather plus a local sum instead of Gloo's ring; 0 always uses the ring.
  int64_t gather_reduce_max_floats = int64_t{1} << 18;
  // Same-host ranks gather through shared memory, per-rank payloads up to this many
  // bytes (a multiple of 64); false: always Gloo's TCP transport.
  bool shared_memory = true;
  size_t shm_slot_bytes = size_t{1} << 20;
  // Which ranks may share memory: those with the same host_id. Empty: this host's
  // identity (boot id, /dev/shm's device, IPC namespace). Tests set it to stand several
  // hosts on one.
  std::string host_id;

  absl::Status Validate() const;
};

class GlooCommGroup : public CommGroup {
 public:

  static absl::StatusOr<std::unique_ptr<GlooCommGroup>> Create(const GlooOptions& options);
  ~GlooCommGroup() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::Status AllReduceSum(absl::Span<float> data) override;
  absl::Status AllGather(absl::Span<const float> in, absl::Span<float> out) override;
  absl::Status Broadcast(absl::Span<uint8_t> data, int root) override;
  absl::Status Barrier() override;

  // Whether collectives go through shared memory among the ranks of each host.
  bool uses_shared_memory() const { return transport_ != Transport::kTcp; }
  // The ranks of each host, by host (in order of their lowest rank), each in rank order.
  const std::vector<std::vector<int>>& hosts() const { return hosts_; }
  // "shared memory (one host)", "TCP", or "shared memory within hosts {0,1} {2,3}, TCP
  // between them": for logs.
  std::string TransportText() const;

 private:
  GlooCommGroup(int rank, int size, std::shared_ptr<gloo::Context> context,
                absl::Duration timeout, int64_t gather_reduce_max_floats);

  // OK, or FAILED_PRECONDITION naming `what` once the group is broken.
  absl::Status Usable(const char* what) const;
  // Runs one gloo collective, turning anything it throws into a Status and breaking
  // the group on failure.
  absl::Status Run(const char* what, const std::function<void(uint32_t tag)>& collective);
  // Breaks the group with `status` (its first failure) and closes the connections.
  absl::Status BreakWith(const absl::Status& status);
  enum class Transport { kTcp, kSharedMemory, kHosts };

  // Create()'s last step: groups the ranks by host (host_id), and sets the transport:
  // shared memory within each host if every host's ranks can open one segment its
  // lowest rank creates.
  absl::Status SetUpSharedMemory(size_t slot_bytes, const std::string& host_id);
  // Runs one gloo collective under `tag` (which every rank took for this collective).
  absl::Status RunTagged(const char* what, uint32_t tag,
                         const std::function<void(uint32_t tag)>& collective);
  // kHosts: the all-gather within hosts and over TCP between them.
  absl::Status HostsAllGather(absl::Span<const float> in, absl::Span<float> out);
  // kHosts, large payloads: a sum within each host, the hosts' sums exchanged between
  // their leaders and added in host order, the leader's broadcast within its host.
  absl::Status HostsAllReduceSum(absl::Span<float> data);
  // kHosts, this host's leader: sends `local` to every other host's leader and receives
  // theirs into (*blocks)[host], each a row of n floats per rank of its host
  // (rows_per_rank) or one row; (*blocks)[host_] is left empty.
  absl::Status ExchangeBetweenHosts(absl::Span<const float> local, size_t n, bool rows_per_rank,
                                    uint32_t tag, std::vector<std::vector<float>>* blocks);
  // Runs `op` on shm_ (non-null) with the collective timeout, breaking the group with
  // its failure (named `what`).
  absl::Status ShmRun(const char* what, const std::function<absl::Status(absl::Duration)>& op);
  // Through shm_ (non-null): one gather of at most a slot per rank, breaking the group
  // on failure; an all-gather of any size, a slot's worth at a time.
  absl::Status ShmGather(absl::Span<const float> in, absl::Span<float> out, const char* what);
  absl::Status ShmAllGatherInPieces(absl::Span<const float> in, absl::Span<float> out);

  const int rank_;
  const int size_;
  std::shared_ptr<gloo::Context> context_;  // Null when size_ == 1.
  const std::chrono::milliseconds timeout_;
  const int64_t gather_reduce_max_floats_;
  uint32_t next_tag_ = 1;  // 0 is Create()'s barrier.
  absl::Status broken_;  // The failure that broke the group, if any.
  Transport transport_ = Transport::kTcp;
  // kSharedMemory: all ranks'; kHosts: this host's ranks' (null on a host of one rank).
  std::unique_ptr<ShmAllGather> shm_;
  std::vector<std::vector<int>> hosts_;  // set in Create() for size > 1
  int host_ = 0;                         // this rank's host: an index into hosts_
  int local_rank_ = 0;                   // this rank's place in hosts_[host_]
  // Scratch kept between collectives, so that none maps fresh pages: the rows a
  // gather-and-sum all-reduce gathers; kHosts: this host's rows, and what a leader
  // receives from the other hosts.
  std::vector<float> gathered_rows_;
  std::vector<float> local_rows_;
  std::vector<std::vector<float>> exchange_blocks_;
};

}  // namespace tpserve

#endif  // TPSERVE_WORKER_COMM_GLOO_COMM_GROUP_H_
