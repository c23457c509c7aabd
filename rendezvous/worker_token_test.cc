#include "rendezvous/worker_token.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"

namespace tpserve {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

TEST(WorkerTokenTest, HmacSha256MatchesRfc4231) {
  // RFC 4231, test case 2.
  EXPECT_EQ(absl::BytesToHexString(HmacSha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(WorkerTokenTest, OnlyTheRightProofVerifies) {
  const std::string token = *GenerateWorkerToken();
  const std::string nonce = *RandomBytes(kNonceBytes);
  const std::string proof = ProveWorkerToken(token, ProofChannel::kControl, nonce);
  ASSERT_EQ(proof.size(), kProofBytes);
  EXPECT_TRUE(VerifyWorkerTokenProof(token, ProofChannel::kControl, nonce, proof));
  EXPECT_FALSE(VerifyWorkerTokenProof(token, ProofChannel::kStore, nonce, proof));
  EXPECT_FALSE(VerifyWorkerTokenProof(*GenerateWorkerToken(), ProofChannel::kControl, nonce,
                                      proof));
  EXPECT_FALSE(VerifyWorkerTokenProof(token, ProofChannel::kControl, *RandomBytes(kNonceBytes),
                                      proof));
  EXPECT_FALSE(VerifyWorkerTokenProof(token, ProofChannel::kControl, nonce, proof.substr(1)));
  EXPECT_FALSE(VerifyWorkerTokenProof(token, ProofChannel::kControl, nonce, token));
  EXPECT_FALSE(VerifyWorkerTokenProof("", ProofChannel::kControl, nonce,
                                      ProveWorkerToken("", ProofChannel::kControl, nonce)));
}

TEST(WorkerTokenTest, GeneratedTokensAreFreshAndFullLength) {
  const std::string a = *GenerateWorkerToken();
  const std::string b = *GenerateWorkerToken();
  EXPECT_EQ(a.size(), kWorkerTokenBytes);
  EXPECT_NE(a, b);
}

TEST(WorkerTokenTest, ReadFromFdReadsToTheEndAndClosesIt) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const std::string token(40, 'x');
  ASSERT_EQ(write(fds[1], token.data(), token.size()), 40);
  close(fds[1]);
  absl::StatusOr<std::string> read = ReadWorkerTokenFd(fds[0]);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, token);
  EXPECT_EQ(fcntl(fds[0], F_GETFD), -1);
  EXPECT_EQ(errno, EBADF);

  ASSERT_EQ(pipe(fds), 0);
  ASSERT_EQ(write(fds[1], "short", 5), 5);
  close(fds[1]);
  EXPECT_EQ(ReadWorkerTokenFd(fds[0]).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(fcntl(fds[0], F_GETFD), -1);
}

TEST(WorkerTokenTest, ReadFromFileStripsTheNewlineAndRefusesShortTokens) {
  const std::string hex(64, 'a');
  const std::string path = TempPath("token");
  std::ofstream(path) << hex << "\n";
  absl::StatusOr<std::string> read = ReadWorkerTokenFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, hex);

  const std::string short_path = TempPath("short_token");
  std::ofstream(short_path) << "0123456789abcdef\n";
  absl::StatusOr<std::string> short_token = ReadWorkerTokenFile(short_path);
  EXPECT_EQ(short_token.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(short_token.status().message().find("at least 32"), std::string::npos)
      << short_token.status();
  EXPECT_EQ(ReadWorkerTokenFile(TempPath("no_such_token")).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace tpserve
