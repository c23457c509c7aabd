// ShmAllGather between forked rank processes: many all-gathers of changing sizes with
// ranks running at different speeds (so the two banks are exercised with a peer a
// collective ahead), and each way a peer fails — exits, never comes, breaks the
// segment — failing the waiting rank in bounded time. The name never outlives Unlink()
// or rank 0.
#include "worker/comm/shm_all_gather.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "worker/kernels/cpu/cpu_threads.h"
#include "testing/cuda_emu/rank_processes.h"

namespace tpserve {
namespace {

constexpr size_t kSlotBytes = 64 * 1024;

bool NameExists(const std::string& name) {
  struct stat st {};
  return stat(("/dev/shm" + name).c_str(), &st) == 0;
}

// Rank 0 creates before the fork; the children open it by name.
std::unique_ptr<ShmAllGather> Join(const std::string& name, int rank, int size) {
  absl::StatusOr<std::unique_ptr<ShmAllGather>> group =
      ShmAllGather::Open(name, rank, size, kSlotBytes, /*create=*/false);
  return group.ok() ? *std::move(group) : nullptr;
}

// Runs `body` as `size` rank processes sharing one fresh segment (rank 0's created before
// the fork, the others opened by name); each rank's failure ("" if none). The name is
// unlinked afterwards; `kept` says whether it still existed then.
std::vector<std::string> OnSegment(int size,
                                   const std::function<std::string(ShmAllGather&, int)>& body,
                                   bool* kept = nullptr) {
  const std::string name = ShmAllGather::NewName();
  absl::StatusOr<std::unique_ptr<ShmAllGather>> root =
      ShmAllGather::Open(name, 0, size, kSlotBytes, /*create=*/true);
  if (!root.ok()) return std::vector<std::string>(size, root.status().ToString());
  std::vector<std::string> failures = emu::RunRanks(size, [&](int rank) -> std::string {
    std::unique_ptr<ShmAllGather> own = rank == 0 ? nullptr : Join(name, rank, size);
    ShmAllGather* group = rank == 0 ? root->get() : own.get();
    if (group == nullptr) return "open failed";
    return body(*group, rank);
  });
  if (kept != nullptr) *kept = NameExists(name);
  (*root)->Unlink();
  if (kept != nullptr) *kept = *kept && !NameExists(name);
  return failures;
}

float Value(int rank, int op, size_t i) {
  return static_cast<float>(rank * 1000003 + op * 101 + i);
}

TEST(ShmAllGatherTest, ManyGathersAtDifferentSpeedsAreExact) {
  for (int size : {2, 3, 4}) {
    bool kept = false;  // the name, until Unlink()
    const std::vector<std::string> failures = OnSegment(size, [&](ShmAllGather& group, int rank)
                                                            -> std::string {
      for (int op = 0; op < 600; ++op) {
        const size_t n = 1 + (op * 37) % (kSlotBytes / sizeof(float));
        if ((op + rank) % 97 == 0) absl::SleepFor(absl::Milliseconds(3));  // fall behind
        std::vector<float> in(n), out(n * size, -1.0f);
        for (size_t i = 0; i < n; ++i) in[i] = Value(rank, op, i);
        if (absl::Status s = group.AllGather(in, absl::MakeSpan(out), absl::Seconds(20));
            !s.ok()) {
          return absl::StrCat("op ", op, ": ", s.ToString());
        }
        for (int r = 0; r < size; ++r) {
          for (size_t i = 0; i < n; ++i) {
            if (out[r * n + i] != Value(r, op, i)) {
              return absl::StrCat("op ", op, ": rank ", r, "'s element ", i, " is wrong");
            }
          }
        }
      }
      return "";
    }, &kept);
    for (int r = 0; r < size; ++r) EXPECT_EQ(failures[r], "") << "size " << size << " rank " << r;
    EXPECT_TRUE(kept);
  }
}

// All-reduces of up to three slots' worth (so in pieces), between all-gathers, ranks at
// different speeds: every rank gets exactly the rank-order sum of every rank's values
// (fractions, so the order shows in the bits), on one compute thread a rank or three.
TEST(ShmAllGatherTest, AllReduceSumsInRankOrderPieceByPiece) {
  for (int size : {2, 3, -3}) {  // -3: three ranks on three compute threads each
    SetCpuThreads(size < 0 ? 3 : 1);
    size = std::abs(size);
    auto value = [](int rank, int op, size_t i) {
      return static_cast<float>(Value(rank, op, i)) / 7.0f + 1e-3f * static_cast<float>(rank);
    };
    const std::vector<std::string> failures = OnSegment(size, [&](ShmAllGather& group, int rank)
                                                            -> std::string {
      for (int op = 0; op < 120; ++op) {
        const size_t n = 1 + (op * 997) % (3 * kSlotBytes / sizeof(float));
        if ((op + rank) % 13 == 0) absl::SleepFor(absl::Milliseconds(2));  // fall behind
        std::vector<float> data(n);
        for (size_t i = 0; i < n; ++i) data[i] = value(rank, op, i);
        if (absl::Status s = group.AllReduceSum(absl::MakeSpan(data), absl::Seconds(20));
            !s.ok()) {
          return absl::StrCat("op ", op, ": ", s.ToString());
        }
        for (size_t i = 0; i < n; ++i) {
          float want = value(0, op, i);
          for (int r = 1; r < size; ++r) want += value(r, op, i);
          if (data[i] != want) return absl::StrCat("op ", op, ": element ", i, " is wrong");
        }
        std::vector<float> one = {static_cast<float>(rank)}, all(size);
        if (absl::Status s = group.AllGather(one, absl::MakeSpan(all), absl::Seconds(20));
            !s.ok()) {
          return absl::StrCat("gather after op ", op, ": ", s.ToString());
        }
        for (int r = 0; r < size; ++r) {
          if (all[r] != static_cast<float>(r)) return absl::StrCat("gather after op ", op);
        }
      }
      return "";
    });
    for (int r = 0; r < size; ++r) EXPECT_EQ(failures[r], "") << "size " << size << " rank " << r;
  }
  SetCpuThreads(1);
}

// Rank 0 gathers while rank 1 does `peer`; rank 0 must fail with `code` naming `why`
// within `bound`, and refuse every later call.
void ExpectWaitingRankFails(const std::function<void(ShmAllGather&)>& peer, absl::StatusCode code,
                            const std::string& why, absl::Duration timeout, absl::Duration bound) {
  const std::string name = ShmAllGather::NewName();
  absl::StatusOr<std::unique_ptr<ShmAllGather>> root =
      ShmAllGather::Open(name, 0, 2, kSlotBytes, /*create=*/true);
  ASSERT_TRUE(root.ok()) << root.status();
  const std::vector<std::string> failures = emu::RunRanks(2, [&](int rank) -> std::string {
    if (rank == 1) {
      std::unique_ptr<ShmAllGather> own = Join(name, 1, 2);
      if (own == nullptr) return "open failed";
      peer(*own);
      return "";
    }
    absl::SleepFor(absl::Milliseconds(50));  // rank 1 has joined
    std::vector<float> in(8, 1.0f), out(16);
    const absl::Time start = absl::Now();
    const absl::Status s = (*root)->AllGather(in, absl::MakeSpan(out), timeout);
    const absl::Duration took = absl::Now() - start;
    std::fprintf(stderr, "rank 0 failed after %s: %s\n", absl::FormatDuration(took).c_str(),
                 s.ToString().c_str());
    if (s.code() != code || !absl::StrContains(s.message(), why)) {
      return "wrong failure: " + s.ToString();
    }
    if (took > bound) return "took " + absl::FormatDuration(took);
    if ((*root)->AllGather(in, absl::MakeSpan(out), timeout).ok()) {
      return "a later call on the failed group passed";
    }
    return "";
  });
  EXPECT_EQ(failures, (std::vector<std::string>{"", ""}));
  root->reset();  // rank 0's destructor removes the name it never unlinked
  EXPECT_FALSE(NameExists(name));
}

// Broadcasts from every root in turn, up to three slots' worth (so in pieces), mixed
// with all-gathers, ranks at different speeds: every rank gets root's data exactly, and
// a root's next write never lands on a bank a slow rank is still reading.
TEST(ShmAllGatherTest, BroadcastsFromEveryRootPieceByPiece) {
  for (int size : {2, 3}) {
    const std::vector<std::string> failures = OnSegment(size, [&](ShmAllGather& group, int rank)
                                                            -> std::string {
      for (int op = 0; op < 150; ++op) {
        const int from = op % size;
        const size_t n = 1 + (op * 1009) % (3 * kSlotBytes / sizeof(float));
        if ((op + rank) % 11 == 0) absl::SleepFor(absl::Milliseconds(2));  // fall behind
        std::vector<float> data(n, -1.0f);
        if (rank == from) {
          for (size_t i = 0; i < n; ++i) data[i] = Value(from, op, i);
        }
        if (absl::Status s = group.Broadcast(absl::MakeSpan(data), from, absl::Seconds(20));
            !s.ok()) {
          return absl::StrCat("op ", op, ": ", s.ToString());
        }
        for (size_t i = 0; i < n; ++i) {
          if (data[i] != Value(from, op, i)) return absl::StrCat("op ", op, ": element ", i);
        }
        if (op % 3 == 0) {
          std::vector<float> one = {static_cast<float>(rank)}, all(size);
          if (!group.AllGather(one, absl::MakeSpan(all), absl::Seconds(20)).ok()) {
            return absl::StrCat("gather after op ", op);
          }
        }
      }
      return "";
    });
    for (int r = 0; r < size; ++r) EXPECT_EQ(failures[r], "") << "size " << size << " rank " << r;
  }
}

TEST(ShmAllGatherTest, PeerThatExitsFailsTheWaitingRankFast) {
  ExpectWaitingRankFails([](ShmAllGather&) { _exit(0); }, absl::StatusCode::kUnavailable,
                         "rank 1 (pid", absl::Seconds(30), absl::Seconds(2));
}

TEST(ShmAllGatherTest, PeerThatNeverComesFailsTheWaitingRankAtTheTimeout) {
  ExpectWaitingRankFails([](ShmAllGather&) { absl::SleepFor(absl::Seconds(2)); },
                         absl::StatusCode::kDeadlineExceeded, "within", absl::Milliseconds(300),
                         absl::Milliseconds(1500));
}

TEST(ShmAllGatherTest, PeerThatBreaksTheSegmentFailsTheWaitingRank) {
  ExpectWaitingRankFails(
      [](ShmAllGather& group) {
        group.Break();
        absl::SleepFor(absl::Seconds(1));  // alive, but gone from the group
      },
      absl::StatusCode::kUnavailable, "rank 1 broke", absl::Seconds(30), absl::Seconds(2));
}

TEST(ShmAllGatherTest, BadArgumentsAreRefused) {
  EXPECT_EQ(ShmAllGather::Open(ShmAllGather::NewName(), 0, 0, kSlotBytes, true).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ShmAllGather::Open(ShmAllGather::NewName(), 2, 2, kSlotBytes, true).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ShmAllGather::Open(ShmAllGather::NewName(), 0, 2, 100, true).status().code(),
            absl::StatusCode::kInvalidArgument);  // not a multiple of 64
  // Nobody created it: another host's, or another IPC namespace's.
  EXPECT_EQ(ShmAllGather::Open(ShmAllGather::NewName(), 1, 2, kSlotBytes, false).status().code(),
            absl::StatusCode::kUnavailable);
  const std::string name = ShmAllGather::NewName();
  absl::StatusOr<std::unique_ptr<ShmAllGather>> root =
      ShmAllGather::Open(name, 0, 2, kSlotBytes, true);
  ASSERT_TRUE(root.ok());
  // A peer that thinks the group is bigger, or its slots another size, cannot join.
  EXPECT_FALSE(ShmAllGather::Open(name, 1, 3, kSlotBytes, false).ok());
  EXPECT_FALSE(ShmAllGather::Open(name, 1, 2, 2 * kSlotBytes, false).ok());
  std::vector<float> too_big(kSlotBytes / sizeof(float) + 1), out(2 * too_big.size());
  EXPECT_EQ((*root)->AllGather(too_big, absl::MakeSpan(out), absl::Seconds(1)).code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<float> in(4), wrong_out(7);
  EXPECT_EQ((*root)->AllGather(in, absl::MakeSpan(wrong_out), absl::Seconds(1)).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tpserve
