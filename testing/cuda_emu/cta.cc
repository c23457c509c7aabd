#include "testing/cuda_emu/cta.h"

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <unordered_map>
#include <vector>

#include "testing/cuda_emu/emu.h"
#include "testing/cuda_emu/fiber.h"
#include "testing/cuda_emu/guarded_memory.h"

namespace tpserve {
namespace emu {
namespace {

constexpr size_t kStackBytes = 256 << 10;  // a kernel's frames, with room for -O0 builds

[[noreturn]] __attribute__((format(printf, 1, 2))) void Fail(const char* format, ...) {
  std::va_list args;
  va_start(args, format);
  std::fputs("emu: ", stderr);
  std::vfprintf(stderr, format, args);
  std::fputc('\n', stderr);
  va_end(args);
  std::abort();
}

struct Barrier {
  int expected = 0;
  int arrived = 0;
  uint64_t generation = 0;  // completed rounds
};

struct AsyncCopy {
  void* dst;
  const void* src;
  bool valid;  // false: 16 zero bytes, src not read
};

// One emulated CUDA thread; kept, with its stack, from CTA to CTA.
struct Thread {
  Fiber fiber{kStackBytes};
  uint3 idx;
  int linear = 0;  // index in the CTA, x fastest: lane linear % 32 of warp linear / 32
  bool done = false;
  const Barrier* waiting = nullptr;  // blocked until this barrier's generation moves on
  uint64_t wait_generation = 0;
  uint64_t shuffles = 0;  // parity picks the exchange buffer of the next shuffle or ballot
  std::vector<AsyncCopy> uncommitted;
  std::deque<std::vector<AsyncCopy>> committed;  // groups, oldest first

  bool Runnable() const {
    return !done && (waiting == nullptr || waiting->generation != wait_generation);
  }
};

// The CTA that this OS thread runs.
class Cta {
 public:
  void Run(dim3 grid, dim3 block, uint3 block_idx, GuardedMemory& smem,
           const std::function<void()>& body);

  Thread& current() { return *current_; }
  unsigned char* smem() const { return smem_->data(); }
  void SyncThreads() { Wait(block_); }
  void SyncWarp(unsigned mask) {
    CheckMask(mask);
    Wait(warps_[current_->linear / 32]);
  }
  uint64_t Shuffle(unsigned mask, uint64_t bits, int src_lane);
  unsigned Ballot(unsigned mask, bool predicate);
  void CopyAsync(void* dst, const void* src, bool valid);
  void WaitCopies(int max_pending);

 private:
  [[noreturn]] static void ThreadMain();
  void Schedule(bool descending);
  void Wait(Barrier& barrier);
  void CheckMask(unsigned mask) const;
  const uint64_t* Exchange(unsigned mask, uint64_t bits);
  [[noreturn]] void Deadlock() const;

  Fiber scheduler_;  // this OS thread's own stack
  std::vector<std::unique_ptr<Thread>> threads_;
  int num_threads_ = 0;
  Thread* current_ = nullptr;
  Barrier block_;
  std::vector<Barrier> warps_;
  std::vector<uint64_t> exchange_[2];  // [warps·32] shuffle values, double-buffered
  GuardedMemory* smem_ = nullptr;
  const std::function<void()>* body_ = nullptr;
};

thread_local Cta* running = nullptr;  // while a CTA runs on this OS thread
thread_local uint64_t cta_serial = 0;   // CTAs run on this OS thread so far

Cta& Running() {
  if (running == nullptr) Fail("a device function was called outside a kernel");
  return *running;
}

void Cta::Run(dim3 grid, dim3 block, uint3 block_idx, GuardedMemory& smem,
              const std::function<void()>& body) {
  num_threads_ = static_cast<int>(block.x * block.y * block.z);
  while (static_cast<int>(threads_.size()) < num_threads_) {
    threads_.push_back(std::make_unique<Thread>());
  }
  for (int i = 0; i < num_threads_; ++i) {
    Thread& t = *threads_[i];
    t.idx = make_uint3(i % block.x, i / block.x % block.y, i / (block.x * block.y));
    t.linear = i;
    t.done = false;
    t.waiting = nullptr;
    t.shuffles = 0;
    t.uncommitted.clear();
    t.committed.clear();
    t.fiber.Reset(&Cta::ThreadMain);
  }
  block_ = Barrier{num_threads_};
  warps_.assign((num_threads_ + 31) / 32, Barrier{});
  for (size_t w = 0; w < warps_.size(); ++w) {
    warps_[w].expected = std::min(32, num_threads_ - 32 * static_cast<int>(w));
  }
  for (std::vector<uint64_t>& e : exchange_) e.assign(warps_.size() * 32, 0);
  smem.Poison();
  smem_ = &smem;
  body_ = &body;
  blockIdx = block_idx, blockDim = block, gridDim = grid;
  ++cta_serial;
  running = this;
  Schedule((block_idx.x + block_idx.y + block_idx.z) % 2 == 1);
  running = nullptr;
}

void Cta::ThreadMain() {
  Cta& cta = *running;
  (*cta.body_)();
  Thread& t = cta.current();
  if (!t.uncommitted.empty() || !t.committed.empty()) {
    Fail("thread %d of CTA (%u, %u, %u) exited with cp.async copies it never waited for",
         t.linear, blockIdx.x, blockIdx.y, blockIdx.z);
  }
  t.done = true;
  Fiber::Exit(t.fiber, cta.scheduler_);
  __builtin_unreachable();
}

// Sweeps over the threads, resuming each runnable one until it blocks or exits.
void Cta::Schedule(bool descending) {
  int live = num_threads_;
  while (live > 0) {
    bool ran = false;
    for (int k = 0; k < num_threads_; ++k) {
      Thread& t = *threads_[descending ? num_threads_ - 1 - k : k];
      if (!t.Runnable()) continue;
      t.waiting = nullptr;
      current_ = &t;
      threadIdx = t.idx;
      Fiber::Switch(scheduler_, t.fiber);
      ran = true;
      live -= t.done;
    }
    if (!ran) Deadlock();
  }
}

void Cta::Wait(Barrier& barrier) {
  if (++barrier.arrived == barrier.expected) {
    barrier.arrived = 0;
    ++barrier.generation;
    return;
  }
  Thread& t = *current_;
  t.waiting = &barrier;
  t.wait_generation = barrier.generation;
  Fiber::Switch(t.fiber, scheduler_);
}

void Cta::CheckMask(unsigned mask) const {
  const int lanes = warps_[current_->linear / 32].expected;
  const unsigned full = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
  if (mask != 0xffffffffu && mask != full) {
    Fail("thread %d: warp mask %#x: only whole warps are emulated", current_->linear, mask);
  }
}

void Cta::Deadlock() const {
  int at_block = 0, at_warp = 0, exited = 0;
  for (int i = 0; i < num_threads_; ++i) {
    const Thread& t = *threads_[i];
    exited += t.done;
    at_block += t.waiting == &block_;
    at_warp += !t.done && t.waiting != &block_;
  }
  Fail("deadlock in CTA (%u, %u, %u) of %d threads: %d wait at __syncthreads, %d at a warp "
       "barrier or shuffle, %d exited",
       blockIdx.x, blockIdx.y, blockIdx.z, num_threads_, at_block, at_warp, exited);
}

// Posts this lane's bits, waits for its warp, and returns the values of the warp's lanes.
const uint64_t* Cta::Exchange(unsigned mask, uint64_t bits) {
  CheckMask(mask);
  Thread& t = *current_;
  const int warp = t.linear / 32;
  // Alternate buffers: a lane can write the next exchange's value before the others have
  // read this one's, but not the one after (it would have to pass their barrier first).
  uint64_t* lanes = exchange_[t.shuffles++ % 2].data() + warp * 32;
  lanes[t.linear % 32] = bits;
  Wait(warps_[warp]);
  return lanes;
}

uint64_t Cta::Shuffle(unsigned mask, uint64_t bits, int src_lane) {
  const uint64_t* lanes = Exchange(mask, bits);
  const int warp_size = warps_[current_->linear / 32].expected;
  if (src_lane >= warp_size) {
    Fail("thread %d: shuffle from lane %d of a warp of %d", current_->linear, src_lane,
         warp_size);
  }
  return lanes[src_lane];
}

unsigned Cta::Ballot(unsigned mask, bool predicate) {
  const uint64_t* lanes = Exchange(mask, predicate);
  unsigned votes = 0;
  for (int i = 0; i < warps_[current_->linear / 32].expected; ++i) {
    votes |= static_cast<unsigned>(lanes[i] != 0) << i;
  }
  return votes;
}

void Cta::CopyAsync(void* dst, const void* src, bool valid) {
  const auto* d = static_cast<unsigned char*>(dst);
  if ((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) % 16 != 0) {
    Fail("thread %d: cp.async of 16 bytes from %p to %p: misaligned", current_->linear, src, dst);
  }
  if (d < smem() || d + 16 > smem() + smem_->bytes()) {
    Fail("thread %d: cp.async to byte %td of %zu bytes of dynamic shared memory",
         current_->linear, d - smem(), smem_->bytes());
  }
  current_->uncommitted.push_back({dst, src, valid});
}

void Cta::WaitCopies(int max_pending) {
  std::deque<std::vector<AsyncCopy>>& groups = current_->committed;
  while (static_cast<int>(groups.size()) > max_pending) {
    for (const AsyncCopy& c : groups.front()) {
      if (c.valid) {
        std::memcpy(c.dst, c.src, 16);
      } else {
        std::memset(c.dst, 0, 16);
      }
    }
    groups.pop_front();
  }
}

}  // namespace

void RunGrid(dim3 grid, dim3 block, size_t smem_bytes, const std::function<void()>& body) {
  if (running != nullptr) Fail("a kernel launched another kernel (not emulated)");
  static thread_local Cta cta;
  GuardedMemory smem(smem_bytes, 16);  // reused by the launch's CTAs
  for (unsigned z = 0; z < grid.z; ++z) {
    for (unsigned y = 0; y < grid.y; ++y) {
      for (unsigned x = 0; x < grid.x; ++x) cta.Run(grid, block, make_uint3(x, y, z), smem, body);
    }
  }
}

unsigned char* DynamicSmem() { return Running().smem(); }
void SyncThreads() { Running().SyncThreads(); }
void SyncWarp(unsigned mask) { Running().SyncWarp(mask); }
int LaneId() { return Running().current().linear % 32; }
uint64_t ShuffleBits(unsigned mask, uint64_t bits, int src_lane) {
  return Running().Shuffle(mask, bits, src_lane);
}
unsigned Ballot(unsigned mask, bool predicate) { return Running().Ballot(mask, predicate); }
void CopyAsync16(void* smem, const void* global, bool valid) {
  Running().CopyAsync(smem, global, valid);
}
void CommitCopies() {
  Thread& t = Running().current();
  t.committed.push_back(std::move(t.uncommitted));
  t.uncommitted.clear();
}
void WaitCopies(int max_pending) { Running().WaitCopies(max_pending); }

void PoisonStaticShared(void* p, size_t bytes) {
  Running();
  thread_local std::unordered_map<void*, uint64_t> poisoned_in;  // object -> its CTA serial
  uint64_t& serial = poisoned_in[p];
  if (serial == cta_serial) return;
  serial = cta_serial;
  std::memset(p, 0xFF, bytes);
}

void CheckAligned(const void* p, size_t bytes, const char* access) {
  if (reinterpret_cast<uintptr_t>(p) % bytes == 0) return;
  const Thread& t = Running().current();
  Fail("thread %d of CTA (%u, %u, %u): %zu-byte %s at %p: misaligned address", t.linear,
       blockIdx.x, blockIdx.y, blockIdx.z, bytes, access, p);
}

}  // namespace emu
}  // namespace tpserve
