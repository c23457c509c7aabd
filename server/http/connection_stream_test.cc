#include "server/http/connection_stream.h"

#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace tpserve {
namespace {

// A connected pair: the stream's end (fds_[0]) and the client's (fds_[1]).
class ConnectionStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds_), 0);
    wake_ = eventfd(0, EFD_CLOEXEC);
    ASSERT_GE(wake_, 0);
  }
  void TearDown() override {
    for (const int fd : {fds_[0], fds_[1], wake_}) {
      if (fd >= 0) close(fd);
    }
  }
  void ClientSends(const std::string& data) {
    ASSERT_EQ(send(fds_[1], data.data(), data.size(), 0), static_cast<ssize_t>(data.size()));
  }
  void Wake() {
    const uint64_t one = 1;
    ASSERT_EQ(write(wake_, &one, sizeof(one)), static_cast<ssize_t>(sizeof(one)));
  }
  std::string ReadAll(ConnectionStream& stream) {
    std::string out;
    char buf[64];
    ssize_t n;
    while ((n = stream.read(buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
    return out;
  }

  int fds_[2] = {-1, -1};
  int wake_ = -1;
};

TEST_F(ConnectionStreamTest, ARequestReadsItsBudgetAndTheRestWaitsForTheNext) {
  ConnectionStream stream(fds_[0], wake_, absl::Seconds(1));
  ClientSends("abcdef");
  ASSERT_TRUE(stream.WaitForRequest(absl::Now() + absl::Seconds(1)));
  stream.StartRequest(absl::Now() + absl::Milliseconds(100), 3);
  EXPECT_EQ(ReadAll(stream), "abc");
  stream.AllowMore(1);
  EXPECT_EQ(ReadAll(stream), "d");
  EXPECT_TRUE(stream.WaitForRequest(absl::Now()));  // already buffered
  stream.StartRequest(absl::Now() + absl::Milliseconds(100), 100);
  EXPECT_EQ(ReadAll(stream), "ef");
}

TEST_F(ConnectionStreamTest, ReadsFailAtTheDeadlineHoweverTheBytesTrickle) {
  ConnectionStream stream(fds_[0], wake_, absl::Seconds(1));
  std::thread trickle([this] {
    for (int i = 0; i < 20; ++i) {
      if (send(fds_[1], "x", 1, MSG_NOSIGNAL) != 1) return;
      absl::SleepFor(absl::Milliseconds(50));
    }
  });
  const absl::Time start = absl::Now();
  stream.StartRequest(start + absl::Milliseconds(300), 1 << 20);
  const std::string got = ReadAll(stream);
  const absl::Duration took = absl::Now() - start;
  EXPECT_GE(took, absl::Milliseconds(290));
  EXPECT_LT(took, absl::Milliseconds(600));
  EXPECT_LT(got.size(), 20u);
  trickle.join();
}

TEST_F(ConnectionStreamTest, EndOfInputIsNoRequest) {
  ConnectionStream stream(fds_[0], wake_, absl::Seconds(1));
  shutdown(fds_[1], SHUT_WR);
  EXPECT_FALSE(stream.WaitForRequest(absl::Now() + absl::Seconds(5)));
}

TEST_F(ConnectionStreamTest, WakeEndsEveryWaitAtOnce) {
  ConnectionStream stream(fds_[0], wake_, absl::Seconds(5));
  std::thread waker([this] {
    absl::SleepFor(absl::Milliseconds(100));
    Wake();
  });
  // Writes until the socket is full, then waits for the client (5 s), until the wake.
  const std::string chunk(1 << 16, 'y');
  const absl::Time start = absl::Now();
  ssize_t n;
  while ((n = stream.write(chunk.data(), chunk.size())) > 0) {
  }
  EXPECT_EQ(n, -1);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  waker.join();
  EXPECT_FALSE(stream.WaitForRequest(absl::Now() + absl::Seconds(5)));
  stream.StartRequest(absl::Now() + absl::Seconds(5), 100);
  char c;
  EXPECT_EQ(stream.read(&c, 1), -1);
  EXPECT_FALSE(stream.is_writable());
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

TEST_F(ConnectionStreamTest, WriteFailsWhenTheClientTakesNothingForTheWriteTimeout) {
  ConnectionStream stream(fds_[0], wake_, absl::Milliseconds(200));
  const std::string chunk(1 << 16, 'z');
  absl::Time last_progress = absl::Now();
  while (stream.write(chunk.data(), chunk.size()) > 0) last_progress = absl::Now();
  const absl::Duration waited = absl::Now() - last_progress;
  EXPECT_GE(waited, absl::Milliseconds(190));
  EXPECT_LT(waited, absl::Milliseconds(500));
}

TEST_F(ConnectionStreamTest, WriteToAClosedClientIsAnErrorNotSigpipe) {
  ConnectionStream stream(fds_[0], wake_, absl::Seconds(1));
  close(fds_[1]);
  fds_[1] = -1;
  EXPECT_EQ(stream.write("hello", 5), -1);
}

TEST_F(ConnectionStreamTest, LingerEndsWhenTheClientClosesOrAfterHalfASecond) {
  ConnectionStream stream(fds_[0], wake_, absl::Seconds(1));
  absl::Time start = absl::Now();
  stream.Linger();  // the client sends nothing and keeps its end open
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(450));
  char c;
  EXPECT_EQ(recv(fds_[1], &c, 1, 0), 0);  // it saw the end of the stream at once
  ClientSends("leftover");
  shutdown(fds_[1], SHUT_WR);
  start = absl::Now();
  stream.Linger();
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(100));
}

}  // namespace
}  // namespace tpserve
