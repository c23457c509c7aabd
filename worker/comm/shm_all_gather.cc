#include "worker/comm/shm_all_gather.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/spin_wait.h"
#include "base/status_macros.h"
#include "base/subprocess.h"
#include "worker/kernels/cpu/cpu_threads.h"
#include "worker/kernels/cpu/vec_math.h"

namespace tpserve {

// At the start of the segment; every field is written through its atomic.
struct ShmAllGatherHeader {
  std::atomic<int32_t> size;
  std::atomic<int32_t> broken;  // 1 + the rank that broke it, or 0
  std::atomic<int32_t> pids[ShmAllGather::kMaxRanks];
  struct alignas(64) Epoch {
    std::atomic<uint64_t> published;
  } epochs[ShmAllGather::kMaxRanks];
};

namespace {

static_assert(std::atomic<uint64_t>::is_always_lock_free &&
                  std::atomic<int32_t>::is_always_lock_free,
              "the segment's atomics must work across processes");

// The slots start on a cache line after the header.
constexpr size_t kHeaderBytes = (sizeof(ShmAllGatherHeader) + 63) / 64 * 64;

}  // namespace

std::string ShmAllGather::NewName() {
  std::random_device device;
  const uint64_t random = (uint64_t{device()} << 32) ^ device();
  return absl::StrCat("/tpserve-ag-", getpid(), "-", absl::Hex(random));
}

absl::StatusOr<std::unique_ptr<ShmAllGather>> ShmAllGather::Open(const std::string& name, int rank,
                                                                 int size, size_t slot_bytes,
                                                                 bool create) {
  if (size < 1 || size > kMaxRanks || rank < 0 || rank >= size || slot_bytes == 0 ||
      slot_bytes % 64 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared-memory all-gather: rank ", rank, " of ", size, ", slots of ",
                     slot_bytes, " bytes (a multiple of 64, ≤ ", kMaxRanks, " ranks)"));
  }
  const size_t bytes = kHeaderBytes + 2 * static_cast<size_t>(size) * slot_bytes;
  const int fd = shm_open(name.c_str(), create ? (O_RDWR | O_CREAT | O_EXCL) : O_RDWR, 0600);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("shm_open ", name, ": ", std::strerror(errno)));
  }
  // posix_fallocate, not only ftruncate: a /dev/shm too small for the segment must fail
  // here (ENOSPC), not raise SIGBUS at a later write.
  if (create) {
    const int err = ftruncate(fd, static_cast<off_t>(bytes)) != 0
                        ? errno
                        : posix_fallocate(fd, 0, static_cast<off_t>(bytes));
    if (err != 0) {
      close(fd);
      shm_unlink(name.c_str());
      return absl::UnavailableError(
          absl::StrCat("reserving ", bytes, " bytes for ", name, ": ", std::strerror(err)));
    }
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != bytes) {
    close(fd);
    if (create) shm_unlink(name.c_str());
    return absl::UnavailableError(absl::StrCat(name, " is not ", bytes, " bytes long"));
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  close(fd);
  if (base == MAP_FAILED) {
    if (create) shm_unlink(name.c_str());
    return absl::UnavailableError(absl::StrCat("mmap ", name, ": ", std::strerror(err)));
  }
  std::unique_ptr<ShmAllGather> group(new ShmAllGather(name, rank, size, slot_bytes, base, bytes));
  ShmAllGatherHeader* header = group->header_;
  if (create) header->size.store(size, std::memory_order_release);  // the rest is zero
  if (header->size.load(std::memory_order_acquire) != size) {
    return absl::UnavailableError(
        absl::StrCat(name, " is a group of ", header->size.load(), " ranks, not ", size));
  }
  header->pids[rank].store(getpid(), std::memory_order_release);
  return group;
}

ShmAllGather::ShmAllGather(std::string name, int rank, int size, size_t slot_bytes, void* base,
                           size_t mapped)
    : name_(std::move(name)),
      rank_(rank),
      size_(size),
      slot_bytes_(slot_bytes),
      base_(base),
      mapped_(mapped),
      header_(static_cast<ShmAllGatherHeader*>(base)) {}

ShmAllGather::~ShmAllGather() {
  if (rank_ == 0 && !unlinked_) shm_unlink(name_.c_str());
  munmap(base_, mapped_);
}

void ShmAllGather::Unlink() {
  if (unlinked_) return;
  shm_unlink(name_.c_str());
  unlinked_ = true;
}

unsigned char* ShmAllGather::Slot(int bank, int rank) const {
  return static_cast<unsigned char*>(base_) + kHeaderBytes +
         (static_cast<size_t>(bank) * size_ + rank) * slot_bytes_;
}

void ShmAllGather::Break() {
  int32_t none = 0;
  header_->broken.compare_exchange_strong(none, rank_ + 1, std::memory_order_acq_rel);
}

absl::Status ShmAllGather::PeerFailure() const {
  if (const int32_t broken = header_->broken.load(std::memory_order_acquire); broken != 0) {
    return absl::UnavailableError(
        absl::StrCat("rank ", broken - 1, " broke the shared-memory group"));
  }
  for (int r = 0; r < size_; ++r) {
    const int32_t pid = header_->pids[r].load(std::memory_order_acquire);
    if (r != rank_ && pid != 0 && ProcessHasExited(pid)) {
      return absl::UnavailableError(absl::StrCat("rank ", r, " (pid ", pid, ") exited"));
    }
  }
  return absl::OkStatus();
}

absl::Status ShmAllGather::WaitForAll(uint64_t epoch, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  return SpinWait(
      [&] {
        for (int r = 0; r < size_; ++r) {
          if (header_->epochs[r].published.load(std::memory_order_acquire) < epoch) return false;
        }
        return true;
      },
      [&] {
        TPSERVE_RETURN_IF_ERROR(PeerFailure());
        if (absl::Now() < deadline) return absl::OkStatus();
        return absl::DeadlineExceededError(
            absl::StrCat("a peer did not reach the shared-memory all-gather within ",
                         absl::FormatDuration(timeout)));
      });
}

absl::StatusOr<int> ShmAllGather::Exchange(const std::function<void(unsigned char*)>& fill,
                                           absl::Duration timeout) {
  const uint64_t epoch = ++epoch_;
  const int bank = static_cast<int>(epoch % 2);
  fill(Slot(bank, rank_));
  header_->epochs[rank_].published.store(epoch, std::memory_order_release);
  if (absl::Status s = WaitForAll(epoch, timeout); !s.ok()) {
    broken_ = s;
    Break();
    return s;
  }
  return bank;
}

absl::Status ShmAllGather::AllGather(absl::Span<const float> in, absl::Span<float> out,
                                     absl::Duration timeout) {
  if (!broken_.ok()) return broken_;
  const size_t bytes = in.size() * sizeof(float);
  if (bytes > slot_bytes_ || out.size() != in.size() * size_) {
    return absl::InvalidArgumentError(absl::StrCat("shared-memory all-gather of ", in.size(),
                                                   " floats into ", out.size(), " (slots of ",
                                                   slot_bytes_, " bytes, ", size_, " ranks)"));
  }
  TPSERVE_ASSIGN_OR_RETURN(
      const int bank,
      Exchange([&](unsigned char* slot) { std::memcpy(slot, in.data(), bytes); }, timeout));
  for (int r = 0; r < size_; ++r) {
    std::memcpy(out.data() + static_cast<size_t>(r) * in.size(), Slot(bank, r), bytes);
  }
  return absl::OkStatus();
}

absl::Status ShmAllGather::InPieces(absl::Span<float> data, absl::Duration timeout, bool write,
                                    const std::function<void(float* part, size_t count,
                                                             int bank)>& then) {
  if (!broken_.ok()) return broken_;
  const size_t piece = slot_bytes_ / sizeof(float);
  for (size_t first = 0; first < data.size(); first += piece) {
    const size_t count = std::min(piece, data.size() - first);
    float* part = data.data() + first;
    TPSERVE_ASSIGN_OR_RETURN(const int bank, Exchange(
                                                 [&](unsigned char* slot) {
                                                   if (write) {
                                                     std::memcpy(slot, part, count * sizeof(float));
                                                   }
                                                 },
                                                 timeout));
    then(part, count, bank);
  }
  return absl::OkStatus();
}

absl::Status ShmAllGather::AllReduceSum(absl::Span<float> data, absl::Duration timeout) {
  return InPieces(
      data, timeout, /*write=*/true,
      [&](float* part, size_t count, int bank) {
        // In rank order, as a rank-order sum of the gathered rows would: (s0 + s1) + s2 ...
        // Elements split between the rank's compute threads: each sums the same ranks in
        // the same order, so the bits do not move.
        const auto slot = [&](int r) { return reinterpret_cast<const float*>(Slot(bank, r)); };
        ParallelRanges(static_cast<int64_t>(count), /*min_per_thread=*/4096,
                       [&](int64_t begin, int64_t end) {
          float* out = part + begin;
          const int64_t n = end - begin;
          if (size_ == 1) {
            std::memcpy(out, slot(0) + begin, n * sizeof(float));
          } else {
            SumInto(out, slot(0) + begin, slot(1) + begin, n);  // not a copy, then an add
          }
          for (int r = 2; r < size_; ++r) AddInto(out, slot(r) + begin, n);
        });
      });
}

absl::Status ShmAllGather::Broadcast(absl::Span<float> data, int root, absl::Duration timeout) {
  if (root < 0 || root >= size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared-memory broadcast root ", root, " outside [0, ", size_, ")"));
  }
  // Only root writes; the exchange is the epoch's barrier. Root writes this bank again
  // two collectives on, after every rank has read it.
  return InPieces(
      data, timeout, /*write=*/rank_ == root,
      [&](float* part, size_t count, int bank) {
        if (rank_ != root) std::memcpy(part, Slot(bank, root), count * sizeof(float));
      });
}

}  // namespace tpserve
