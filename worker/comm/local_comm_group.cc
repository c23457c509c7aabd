#include "worker/comm/local_comm_group.h"

#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"

namespace tpserve {

struct LocalCommGroup::Hub {
  explicit Hub(int n) : size(n), slots(n, nullptr), counts(n, 0) {}

  // A reusable barrier: the last arriving rank advances the generation.
  void Wait() {
    absl::MutexLock lock(&mu);
    const int64_t gen = generation;
    if (++arrived == size) {
      arrived = 0;
      ++generation;
      cv.SignalAll();
      return;
    }
    while (generation == gen) cv.Wait(&mu);
  }

  const int size;
  absl::Mutex mu;
  absl::CondVar cv;
  int arrived ABSL_GUARDED_BY(mu) = 0;
  int64_t generation ABSL_GUARDED_BY(mu) = 0;
  // Published buffers of the current collective, one per rank. Written before the
  // first rendezvous, read between the first and second.
  std::vector<const void*> slots;
  std::vector<size_t> counts;
};

std::vector<std::unique_ptr<LocalCommGroup>> LocalCommGroup::Create(int size) {
  auto hub = std::make_shared<Hub>(size);
  std::vector<std::unique_ptr<LocalCommGroup>> groups;
  for (int r = 0; r < size; ++r) {
    groups.push_back(std::unique_ptr<LocalCommGroup>(new LocalCommGroup(hub, r, size)));
  }
  return groups;
}

absl::Status LocalCommGroup::AllReduceSum(absl::Span<float> data) {
  // Every rank sums in rank order into a private copy, so all ranks get identical bits.
  hub_->slots[rank_] = data.data();
  hub_->counts[rank_] = data.size();
  hub_->Wait();
  for (int r = 0; r < size_; ++r) {
    if (hub_->counts[r] != data.size()) {
      hub_->Wait();
      return absl::InternalError(absl::StrCat("all-reduce count mismatch: rank ", r, " has ",
                                              hub_->counts[r], ", rank ", rank_, " has ",
                                              data.size()));
    }
  }
  std::vector<float> sum(data.size(), 0.0f);
  for (int r = 0; r < size_; ++r) {
    const float* src = static_cast<const float*>(hub_->slots[r]);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += src[i];
  }
  hub_->Wait();
  std::memcpy(data.data(), sum.data(), sum.size() * sizeof(float));
  return absl::OkStatus();
}

absl::Status LocalCommGroup::AllGather(absl::Span<const float> in, absl::Span<float> out) {
  if (out.size() != in.size() * size_) {
    return absl::InvalidArgumentError("all-gather output must be size() times the input");
  }
  hub_->slots[rank_] = in.data();
  hub_->counts[rank_] = in.size();
  hub_->Wait();
  for (int r = 0; r < size_; ++r) {
    std::memcpy(out.data() + r * in.size(), hub_->slots[r], in.size() * sizeof(float));
  }
  hub_->Wait();
  return absl::OkStatus();
}

absl::Status LocalCommGroup::Broadcast(absl::Span<uint8_t> data, int root) {
  hub_->slots[rank_] = data.data();
  hub_->Wait();
  if (rank_ != root) std::memcpy(data.data(), hub_->slots[root], data.size());
  hub_->Wait();
  return absl::OkStatus();
}

absl::Status LocalCommGroup::Barrier() {
  hub_->Wait();
  return absl::OkStatus();
}

void RunOnLocalRanks(int size, const std::function<void(int, CommGroup&)>& fn) {
  auto groups = LocalCommGroup::Create(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] { fn(r, *groups[r]); });
  }
  for (std::thread& t : threads) t.join();
}

}  // namespace tpserve
