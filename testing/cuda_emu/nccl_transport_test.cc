// The emulated NCCL's wait (nccl_transport.h's WaitUntil) with its peer check given, so
// the order of its looks is tested without racing processes: a peer that completes the
// wait and exits between two looks must not fail it, one that fails first must.
#include "testing/cuda_emu/nccl_transport.h"

#include <chrono>
#include <memory>
#include <string>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

using Clock = std::chrono::steady_clock;

// Rank 0 of two, over a zeroed mapping of its own (no other process joins).
struct TwoRankComm {
  TwoRankComm() : shared(new emu::Shared()) {
    comm.rank = 0;
    comm.nranks = 2;
    comm.shared = shared.get();
  }
  std::unique_ptr<emu::Shared> shared;
  ncclComm comm;
};

TEST(EmuNcclWaitTest, PeerThatCompletesTheWaitAndThenExitsIsNotAFailure) {
  TwoRankComm two;
  bool peer_done = false;
  // The peer's last act before exiting is to complete the wait, so by the time its exit
  // is seen, done() is true: that is the order a rank leaving after its last barrier
  // makes, and the wait must end well.
  const ncclResult_t result = emu::WaitUntil(
      &two.comm, "test wait", Clock::now(), [&] { return peer_done; },
      [&](std::string* why) {
        peer_done = true;
        *why = "test wait: rank 1 (pid 1) exited";
        return ncclRemoteError;
      });
  EXPECT_EQ(result, ncclSuccess);
  EXPECT_EQ(two.comm.error, ncclSuccess);
}

TEST(EmuNcclWaitTest, PeerThatFailsBeforeCompletingBreaksTheCommunicator) {
  TwoRankComm two;
  int looks = 0;
  const ncclResult_t result = emu::WaitUntil(
      &two.comm, "test wait", Clock::now(), [] { return false; },
      [&](std::string* why) {
        ++looks;
        *why = "test wait: rank 1 (pid 1) exited";
        return ncclRemoteError;
      });
  EXPECT_EQ(result, ncclRemoteError);
  EXPECT_EQ(two.comm.error, ncclRemoteError);
  EXPECT_EQ(looks, 1);
  EXPECT_EQ(emu::LastError(), "test wait: rank 1 (pid 1) exited");
}

TEST(EmuNcclWaitTest, PeerThatNeverArrivesFailsAtTheDeadline) {
  TwoRankComm two;
  // A start long enough ago that the deadline has passed at the first check.
  const auto start = Clock::now() - emu::WaitTimeout() - std::chrono::seconds(1);
  const ncclResult_t result = emu::WaitUntil(
      &two.comm, "test wait", start, [] { return false; },
      [](std::string*) { return ncclSuccess; });
  EXPECT_EQ(result, ncclSystemError);
  EXPECT_EQ(two.comm.error, ncclSystemError);
  EXPECT_NE(emu::LastError().find("TPSERVE_EMU_NCCL_TIMEOUT_S"), std::string::npos)
      << emu::LastError();
}

TEST(EmuNcclWaitTest, WaitThatCompletesAtTheDeadlineIsNotAFailure) {
  TwoRankComm two;
  const auto start = Clock::now() - emu::WaitTimeout() - std::chrono::seconds(1);
  int asked = 0;
  bool checked = false;
  // done() turns true only after the first check has run (and seen the deadline passed).
  const ncclResult_t result = emu::WaitUntil(
      &two.comm, "test wait", start,
      [&] {
        ++asked;
        return checked;
      },
      [&](std::string*) {
        checked = true;
        return ncclSuccess;
      });
  EXPECT_EQ(result, ncclSuccess);
  EXPECT_EQ(two.comm.error, ncclSuccess);
  EXPECT_GT(asked, 1);
}

}  // namespace
}  // namespace tpserve
