#include "worker/comm/gloo_comm_group.h"

#include <sys/stat.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "gloo/allgather.h"
#include "gloo/allreduce.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/common/error.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/transport/unbound_buffer.h"
#include "gloo/types.h"
#include "rendezvous/net_socket.h"
#include "rendezvous/tcp_store.h"
#include "worker/kernels/cpu/vec_math.h"

namespace tpserve {
namespace {

// The tag of Create()'s barrier; collectives count up from the next one.
constexpr uint32_t kJoinTag = 0;

void IgnoreSigpipeIfDefault() {
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    signal(SIGPIPE, SIG_IGN);
  }
}

// Calls fn, returning what it throws as a Status; gloo reports every failure by
// throwing, and nothing may escape into our callers.
absl::Status CatchAll(absl::string_view what, const std::function<void()>& fn) {
  try {
    fn();
    return absl::OkStatus();
  } catch (const gloo::IoException& e) {
    return absl::UnavailableError(absl::StrCat(what, ": ", e.what()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(what, ": ", e.what()));
  } catch (...) {
    return absl::InternalError(absl::StrCat(what, ": unknown exception"));
  }
}

// gloo's reduction callback type: (out, in_a, in_b, n).
void SumFloats(void* out, const void* a, const void* b, size_t n) {
  gloo::sum<float>(out, a, b, n);
}

}  // namespace

absl::Status GlooOptions::Validate() const {
  if (size < 1) return absl::InvalidArgumentError(absl::StrCat("size must be >= 1, got ", size));
  if (rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " outside [0, ", size, ")"));
  }
  if (timeout <= absl::ZeroDuration() || connect_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("timeout and connect_timeout must be positive");
  }
  if (size > 1 && (store_port <= 0 || store_port > 65535)) {
    return absl::InvalidArgumentError(absl::StrCat("store_port ", store_port, " is invalid"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<GlooCommGroup>> GlooCommGroup::Create(const GlooOptions& options) {
  TPSERVE_RETURN_IF_ERROR(options.Validate());
  if (options.size == 1) {
    return std::unique_ptr<GlooCommGroup>(
        new GlooCommGroup(0, 1, /*context=*/nullptr, options.timeout,
                          options.gather_reduce_max_floats));
  }
  IgnoreSigpipeIfDefault();
  TPSERVE_ASSIGN_OR_RETURN(
      std::unique_ptr<TcpStoreClient> client,
      TcpStoreClient::Connect(options.store_host, options.store_port, options.connect_timeout,
                              ProcessWorkerToken()));
  gloo::transport::tcp::attr attr;
  if (!options.bind_interface.empty()) {
    attr.iface = options.bind_interface;
  } else if (!options.bind_host.empty()) {
    attr.hostname = options.bind_host;
  } else {
    TPSERVE_ASSIGN_OR_RETURN(attr.hostname,
                             LocalAddressToward(options.store_host, options.store_port));
  }
  std::shared_ptr<gloo::rendezvous::Context> context;
  absl::Status status = CatchAll("gloo rendezvous", [&] {
    std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
    context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.size);
    context->setTimeout(absl::ToChronoMilliseconds(options.connect_timeout));
    gloo::rendezvous::PrefixStore store(options.prefix, *client);
    context->connectFullMesh(store, device);
    // connectFullMesh returns once this rank's pairs are up, which may be before a
    // peer's are. The barrier makes Create() return only once every rank has joined,
    // so a rank that exits after Create() fails its peers' collectives, not their join.
    gloo::BarrierOptions join(context);
    join.setTag(kJoinTag);
    join.setTimeout(absl::ToChronoMilliseconds(options.connect_timeout));
    gloo::barrier(join);
    context->setTimeout(absl::ToChronoMilliseconds(options.timeout));
  });
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat("rank ", options.rank, " of ", options.size,
                                                    ": ", status.message()));
  }
  std::unique_ptr<GlooCommGroup> group(new GlooCommGroup(options.rank, options.size,
                                                         std::move(context), options.timeout,
                                                         options.gather_reduce_max_floats));
  if (options.shared_memory) {
    TPSERVE_RETURN_IF_ERROR(group->SetUpSharedMemory(options.shm_slot_bytes, options.host_id));
  }
  return group;
}

namespace {

// Strings of up to kTextFloats - 1 bytes through a float all-gather: a byte per float.
constexpr size_t kTextFloats = 128;

std::vector<float> TextAsFloats(const std::string& text) {
  std::vector<float> out(kTextFloats, 0.0f);
  for (size_t i = 0; i < std::min(text.size(), kTextFloats - 1); ++i) {
    out[i] = static_cast<float>(static_cast<unsigned char>(text[i]));
  }
  return out;
}

std::string FloatsAsText(absl::Span<const float> floats) {
  std::string out;
  for (float f : floats) {
    if (f == 0.0f) break;
    out.push_back(static_cast<char>(static_cast<unsigned char>(f)));
  }
  return out;
}

// Which ranks can share memory with this one: the same kernel boot, the same /dev/shm
// and the same IPC namespace.
std::string HostIdentity() {
  std::string boot;
  if (FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    char buffer[64] = {};
    if (std::fgets(buffer, sizeof(buffer), f) != nullptr) boot = buffer;
    std::fclose(f);
  }
  boot.erase(absl::StripTrailingAsciiWhitespace(boot).size());
  struct stat shm {}, ipc {};
  stat("/dev/shm", &shm);
  stat("/proc/self/ns/ipc", &ipc);
  return absl::StrCat(boot, "/", shm.st_dev, "/", ipc.st_ino);
}

// The prefix of the slots of ExchangeBetweenHosts' sends (gloo's collectives use small
// ones).
constexpr uint8_t kHostsSlotPrefix = 0x7e;

}  // namespace

absl::Status GlooCommGroup::SetUpSharedMemory(size_t slot_bytes, const std::string& host_id) {
  // 1. Every rank's host identity; the hosts, in order of their lowest rank.
  std::vector<float> ids(kTextFloats * size_);
  TPSERVE_RETURN_IF_ERROR(
      AllGather(TextAsFloats(host_id.empty() ? HostIdentity() : host_id), absl::MakeSpan(ids)));
  std::vector<std::string> id_of(size_);
  for (int r = 0; r < size_; ++r) {
    id_of[r] = FloatsAsText(absl::MakeConstSpan(ids).subspan(r * kTextFloats, kTextFloats));
    int h = 0;
    while (h < static_cast<int>(hosts_.size()) && id_of[hosts_[h][0]] != id_of[r]) ++h;
    if (h == static_cast<int>(hosts_.size())) hosts_.emplace_back();
    if (r == rank_) {
      host_ = h;
      local_rank_ = static_cast<int>(hosts_[h].size());
    }
    hosts_[h].push_back(r);
  }
  const std::vector<int>& mine = hosts_[host_];
  const int local_size = static_cast<int>(mine.size());
  // 2. Each host of several ranks: its leader creates a segment and every rank learns
  // the leader's name; each rank says whether it could open its host's. Only if all
  // could does any use it: a rank in another IPC namespace or /dev/shm than its id
  // claims cannot, and then the whole group stays on TCP.
  std::unique_ptr<ShmAllGather> shm;
  std::string name;
  if (local_size > 1 && local_rank_ == 0) {
    name = ShmAllGather::NewName();
    absl::StatusOr<std::unique_ptr<ShmAllGather>> made =
        ShmAllGather::Open(name, 0, local_size, slot_bytes, /*create=*/true);
    if (made.ok()) shm = *std::move(made);
    if (shm == nullptr) name.clear();
  }
  std::vector<float> names(kTextFloats * size_);
  TPSERVE_RETURN_IF_ERROR(AllGather(TextAsFloats(name), absl::MakeSpan(names)));
  if (local_size > 1 && local_rank_ > 0) {
    name = FloatsAsText(absl::MakeConstSpan(names).subspan(mine[0] * kTextFloats, kTextFloats));
    if (!name.empty()) {
      absl::StatusOr<std::unique_ptr<ShmAllGather>> opened =
          ShmAllGather::Open(name, local_rank_, local_size, slot_bytes, /*create=*/false);
      if (opened.ok()) shm = *std::move(opened);
    }
  }
  const std::vector<float> opened = {local_size == 1 || shm != nullptr ? 1.0f : 0.0f};
  std::vector<float> all(size_);
  TPSERVE_RETURN_IF_ERROR(AllGather(opened, absl::MakeSpan(all)));
  if (shm != nullptr && local_rank_ == 0) shm->Unlink();  // every rank has it open, or never will
  const bool every_host = std::all_of(all.begin(), all.end(), [](float ok) { return ok == 1.0f; });
  if (!every_host || static_cast<int>(hosts_.size()) == size_) return absl::OkStatus();
  shm_ = std::move(shm);
  transport_ = hosts_.size() == 1 ? Transport::kSharedMemory : Transport::kHosts;
  return absl::OkStatus();
}

std::string GlooCommGroup::TransportText() const {
  switch (transport_) {
    case Transport::kSharedMemory:
      return "shared memory (one host)";
    case Transport::kTcp:
      return hosts_.size() > 1 ? absl::StrCat("TCP (", hosts_.size(), " hosts)") : "TCP";
    case Transport::kHosts:
      break;
  }
  std::string text = "shared memory within hosts";
  for (const std::vector<int>& host : hosts_) {
    absl::StrAppend(&text, " {", absl::StrJoin(host, ","), "}");
  }
  return text + ", TCP between them";
}

absl::Status GlooCommGroup::BreakWith(const absl::Status& status) {
  broken_ = absl::Status(status.code(), absl::StrCat("rank ", rank_, ": ", status.message()));
  // Closing our side makes the peers' pending collectives fail now, not at their timeout.
  CatchAll("gloo close", [&] { context_->closeConnections(); }).IgnoreError();
  if (shm_ != nullptr) shm_->Break();
  return broken_;
}

GlooCommGroup::GlooCommGroup(int rank, int size, std::shared_ptr<gloo::Context> context,
                             absl::Duration timeout, int64_t gather_reduce_max_floats)
    : rank_(rank),
      size_(size),
      context_(std::move(context)),
      timeout_(absl::ToChronoMilliseconds(timeout)),
      gather_reduce_max_floats_(gather_reduce_max_floats) {}

GlooCommGroup::~GlooCommGroup() = default;

absl::Status GlooCommGroup::Usable(const char* what) const {
  if (broken_.ok()) return broken_;
  return absl::FailedPreconditionError(
      absl::StrCat(what, " on a broken comm group: ", broken_.message()));
}

absl::Status GlooCommGroup::Run(const char* what,
                                const std::function<void(uint32_t tag)>& collective) {
  return RunTagged(what, next_tag_++, collective);
}

absl::Status GlooCommGroup::RunTagged(const char* what, uint32_t tag,
                                      const std::function<void(uint32_t tag)>& collective) {
  TPSERVE_RETURN_IF_ERROR(Usable(what));
  absl::Status status = CatchAll(what, [&] { collective(tag); });
  if (status.ok()) return status;
  return BreakWith(status);
}

absl::Status GlooCommGroup::ShmRun(const char* what,
                                   const std::function<absl::Status(absl::Duration)>& op) {
  TPSERVE_RETURN_IF_ERROR(Usable(what));
  absl::Status s = op(absl::Milliseconds(timeout_.count()));
  if (s.ok()) return s;
  return BreakWith(absl::Status(s.code(), absl::StrCat(what, ": ", s.message())));
}

absl::Status GlooCommGroup::ShmGather(absl::Span<const float> in, absl::Span<float> out,
                                      const char* what) {
  return ShmRun(what, [&](absl::Duration timeout) { return shm_->AllGather(in, out, timeout); });
}

absl::Status GlooCommGroup::ShmAllGatherInPieces(absl::Span<const float> in,
                                                 absl::Span<float> out) {
  const size_t piece = shm_->slot_bytes() / sizeof(float), n = in.size();
  const int ranks = shm_->size();
  std::vector<float> gathered(std::min(piece, n) * ranks);
  for (size_t first = 0; first < n; first += piece) {
    const size_t count = std::min(piece, n - first);
    const absl::Span<float> part = absl::MakeSpan(gathered.data(), count * ranks);
    TPSERVE_RETURN_IF_ERROR(ShmGather(in.subspan(first, count), part, "all-gather"));
    for (int r = 0; r < ranks; ++r) {
      std::memcpy(out.data() + r * n + first, part.data() + r * count, count * sizeof(float));
    }
  }
  return absl::OkStatus();
}

absl::Status GlooCommGroup::HostsAllGather(absl::Span<const float> in, absl::Span<float> out) {
  TPSERVE_RETURN_IF_ERROR(Usable("all-gather"));
  const uint32_t tag = next_tag_++;  // every rank takes the tag, leader or not
  const size_t n = in.size();
  const std::vector<int>& mine = hosts_[host_];
  // This host's ranks' rows, in their order (kept between calls: no fresh pages).
  std::vector<float>& local = local_rows_;
  local.resize(mine.size() * n);
  if (shm_ != nullptr) {
    if (n * sizeof(float) <= shm_->slot_bytes()) {
      TPSERVE_RETURN_IF_ERROR(ShmGather(in, absl::MakeSpan(local), "all-gather within a host"));
    } else {
      TPSERVE_RETURN_IF_ERROR(ShmAllGatherInPieces(in, absl::MakeSpan(local)));
    }
  } else {
    std::memcpy(local.data(), in.data(), n * sizeof(float));
  }
  if (local_rank_ == 0) {
    std::vector<std::vector<float>>& blocks = exchange_blocks_;
    TPSERVE_RETURN_IF_ERROR(ExchangeBetweenHosts(local, n, /*rows_per_rank=*/true, tag, &blocks));
    for (size_t h = 0; h < hosts_.size(); ++h) {
      const float* rows = static_cast<int>(h) == host_ ? local.data() : blocks[h].data();
      for (size_t j = 0; j < hosts_[h].size(); ++j) {
        std::memcpy(out.data() + hosts_[h][j] * n, rows + j * n, n * sizeof(float));
      }
    }
  }
  if (shm_ == nullptr) return absl::OkStatus();
  return ShmRun("all-gather from the host's leader", [&](absl::Duration timeout) {
    return shm_->Broadcast(out, /*root=*/0, timeout);
  });
}

absl::Status GlooCommGroup::ExchangeBetweenHosts(absl::Span<const float> local, size_t n,
                                                 bool rows_per_rank, uint32_t tag,
                                                 std::vector<std::vector<float>>* blocks) {
  blocks->resize(hosts_.size());  // kept between calls: no fresh pages per collective
  return RunTagged("exchange between hosts", tag, [&](uint32_t) {
    const uint64_t slot = gloo::Slot::build(kHostsSlotPrefix, tag);
    // gloo only reads a send buffer; its API just lacks const.
    std::unique_ptr<gloo::transport::UnboundBuffer> send = context_->createUnboundBuffer(
        const_cast<float*>(local.data()), local.size() * sizeof(float));
    std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> receives;
    for (size_t h = 0; h < hosts_.size(); ++h) {
      if (static_cast<int>(h) == host_) continue;
      const int leader = hosts_[h][0];
      send->send(leader, slot);
      std::vector<float>& block = (*blocks)[h];
      block.resize((rows_per_rank ? hosts_[h].size() : 1) * n);
      receives.push_back(context_->createUnboundBuffer(block.data(), block.size() * sizeof(float)));
      receives.back()->recv(leader, slot);
    }
    for (auto& receive : receives) {
      if (!receive->waitRecv(timeout_)) throw gloo::IoException("a host's block never came");
    }
    for (size_t i = 0; i < receives.size(); ++i) {
      if (!send->waitSend(timeout_)) throw gloo::IoException("a host's leader never took ours");
    }
  });
}

absl::Status GlooCommGroup::HostsAllReduceSum(absl::Span<float> data) {
  TPSERVE_RETURN_IF_ERROR(Usable("all-reduce"));
  const uint32_t tag = next_tag_++;  // every rank takes the tag, leader or not
  if (shm_ != nullptr) {
    TPSERVE_RETURN_IF_ERROR(ShmRun("all-reduce within a host", [&](absl::Duration timeout) {
      return shm_->AllReduceSum(data, timeout);
    }));
  }
  if (local_rank_ == 0) {
    std::vector<std::vector<float>>& partial = exchange_blocks_;
    TPSERVE_RETURN_IF_ERROR(ExchangeBetweenHosts(data, data.size(), /*rows_per_rank=*/false,
                                                 tag, &partial));
    // In host order on every leader: every rank gets the same bits. Host 0's leader adds
    // into its own sum; the others into host 0's, then copy.
    float* sum = host_ == 0 ? data.data() : partial[0].data();
    for (size_t h = 1; h < partial.size(); ++h) {
      AddInto(sum, static_cast<int>(h) == host_ ? data.data() : partial[h].data(),
              static_cast<int64_t>(data.size()));
    }
    if (host_ != 0) std::memcpy(data.data(), sum, data.size() * sizeof(float));
  }
  if (shm_ == nullptr) return absl::OkStatus();
  return ShmRun("all-reduce from the host's leader", [&](absl::Duration timeout) {
    return shm_->Broadcast(data, /*root=*/0, timeout);
  });
}

absl::Status GlooCommGroup::AllReduceSum(absl::Span<float> data) {
  if (size_ == 1 || data.empty()) return Usable("all-reduce");
  if (transport_ == Transport::kHosts &&
      static_cast<int64_t>(data.size()) * size_ > gather_reduce_max_floats_) {
    return HostsAllReduceSum(data);
  }
  if (transport_ == Transport::kSharedMemory) {
    // Ranks on one host sum straight out of the shared segment: one copy in and a read
    // of every rank's slot, where the TCP ring copies through the kernel 2·(T − 1) times
    // (a prefill step's all-reduces are megabytes; comm_benchmark, docs/perf.md).
    return ShmRun("all-reduce",
                  [&](absl::Duration timeout) { return shm_->AllReduceSum(data, timeout); });
  }
  if (static_cast<int64_t>(data.size()) * size_ <= gather_reduce_max_floats_) {
    // Small payloads (a decode step's rows) are latency-bound: one all-gather and a
    // local sum take one exchange where the ring takes 2·(T − 1) (measured by
    // //worker/comm:comm_benchmark, docs/perf.md). Every rank sums in rank order, so
    // all ranks get the same bits.
    std::vector<float>& gathered = gathered_rows_;  // kept between calls
    gathered.resize(data.size() * size_);
    TPSERVE_RETURN_IF_ERROR(AllGather(data, absl::MakeSpan(gathered)));
    for (size_t i = 0; i < data.size(); ++i) {
      float sum = gathered[i];
      for (int r = 1; r < size_; ++r) sum += gathered[r * data.size() + i];
      data[i] = sum;
    }
    return absl::OkStatus();
  }
  return Run("all-reduce", [&](uint32_t tag) {
    gloo::AllreduceOptions opts(context_);
    opts.setOutput(data.data(), data.size());
    opts.setReduceFunction(&SumFloats);
    opts.setTag(tag);
    opts.setTimeout(timeout_);
    gloo::allreduce(opts);
  });
}

absl::Status GlooCommGroup::AllGather(absl::Span<const float> in, absl::Span<float> out) {
  if (out.size() != in.size() * size_) {
    return absl::InvalidArgumentError(absl::StrCat("all-gather output has ", out.size(),
                                                   " elements, want size() · ", in.size()));
  }
  if (size_ == 1 || in.empty()) {
    if (!in.empty()) std::memcpy(out.data(), in.data(), in.size() * sizeof(float));
    return Usable("all-gather");
  }
  if (transport_ == Transport::kHosts) return HostsAllGather(in, out);
  if (transport_ == Transport::kSharedMemory) {
    if (in.size() * sizeof(float) <= shm_->slot_bytes()) return ShmGather(in, out, "all-gather");
    return ShmAllGatherInPieces(in, out);
  }
  return Run("all-gather", [&](uint32_t tag) {
    gloo::AllgatherOptions opts(context_);
    // gloo only reads the input; its API just lacks const.
    opts.setInput(const_cast<float*>(in.data()), in.size());
    opts.setOutput(out.data(), out.size());
    opts.setTag(tag);
    opts.setTimeout(timeout_);
    gloo::allgather(opts);
  });
}

absl::Status GlooCommGroup::Broadcast(absl::Span<uint8_t> data, int root) {
  if (root < 0 || root >= size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("broadcast root ", root, " outside [0, ", size_, ")"));
  }
  if (size_ == 1 || data.empty()) return Usable("broadcast");
  return Run("broadcast", [&](uint32_t tag) {
    gloo::BroadcastOptions opts(context_);
    opts.setOutput(data.data(), data.size());
    opts.setRoot(root);
    opts.setTag(tag);
    opts.setTimeout(timeout_);
    gloo::broadcast(opts);
  });
}

absl::Status GlooCommGroup::Barrier() {
  if (size_ == 1) return Usable("barrier");
  return Run("barrier", [&](uint32_t tag) {
    gloo::BarrierOptions opts(context_);
    opts.setTag(tag);
    opts.setTimeout(timeout_);
    gloo::barrier(opts);
  });
}

}  // namespace tpserve
