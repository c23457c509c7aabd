// tpserve_worker's process contract against a scripted frontend: it proves the worker
// token of its --worker-token-file (or --worker-token-fd) without sending it, exits 1
// with the frontend's UNAUTHENTICATED when refused, exits 0 on Shutdown, exits at once
// (3) when the frontend's stream ends once assigned, reports a bad Assignment as Error
// and exits 1, and fails cleanly on bad flags or an unreachable frontend.
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/subprocess.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "rendezvous/worker_token.h"
#include "tpserve/v1/worker.grpc.pb.h"

namespace tpserve {
namespace {

using worker::v1::FrontendMessage;
using worker::v1::WorkerMessage;
using Stream = grpc::ServerReaderWriter<FrontendMessage, WorkerMessage>;

// Runs `script` for each Attach call; records the worker's messages.
class ScriptedFrontend final : public worker::v1::WorkerControl::Service {
 public:
  explicit ScriptedFrontend(std::function<void(Stream*)> script) : script_(std::move(script)) {}
  grpc::Status Attach(grpc::ServerContext*, Stream* stream) override {
    script_(stream);
    return status_;
  }
  // What Attach ends the call with (set before the worker runs).
  void set_status(grpc::Status status) { status_ = std::move(status); }

 private:
  std::function<void(Stream*)> script_;
  grpc::Status status_ = grpc::Status::OK;
};

constexpr char kToken[] = "0123456789abcdef0123456789abcdef-test-token";

// A token file in the test's temporary folder.
std::string TokenFile() {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/worker_token";
  std::ofstream(path) << kToken << "\n";
  return path;
}

// Reads Hello, challenges the worker and checks its Proof; the Hello in `hello`.
bool ChallengeAndVerify(Stream* s, WorkerMessage* hello) {
  const std::string nonce(kNonceBytes, '\x5a');
  FrontendMessage challenge;
  challenge.mutable_challenge()->set_nonce(nonce);
  WorkerMessage proof;
  if (!s->Read(hello) || !s->Write(challenge) || !s->Read(&proof)) return false;
  return VerifyWorkerTokenProof(kToken, ProofChannel::kControl, nonce, proof.proof().hmac());
}

std::string WorkerBinary() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  return absl::StrCat(srcdir ? srcdir : ".", "/tpserve/worker/rank/tpserve_worker");
}

// Serves `frontend` on a fresh Unix socket, runs the worker against it, and returns its
// exit (or -99 if it has not exited within `limit`).
ChildExit RunWorker(ScriptedFrontend* frontend, absl::Duration limit,
                    std::vector<std::string> extra_args = {}, bool with_token_flag = false) {
  char dir[] = "/tmp/tpserve_worker_XXXXXX";
  if (mkdtemp(dir) == nullptr) return {};
  const std::string address = absl::StrCat("unix:", dir, "/c.sock");
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials());
  builder.RegisterService(frontend);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  std::vector<std::string> argv = {WorkerBinary(), "--frontend", address};
  if (!with_token_flag) argv.insert(argv.end(), {"--worker-token-file", TokenFile()});
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  absl::StatusOr<pid_t> pid = Spawn(argv);
  ChildExit exit{0, -99, 0};
  const absl::Time deadline = absl::Now() + limit;
  while (pid.ok() && absl::Now() < deadline) {
    if (std::optional<ChildExit> e = PollChild(*pid)) {
      exit = *e;
      break;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  if (exit.exit_code == -99 && pid.ok()) TerminateAndReap({*pid}, absl::ZeroDuration());
  server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  unlink(absl::StrCat(dir, "/c.sock").c_str());
  rmdir(dir);
  return exit;
}

TEST(WorkerBinaryTest, ShutdownAfterTheProofExitsZero) {
  WorkerMessage hello;
  bool proved = false;
  ScriptedFrontend f([&](Stream* s) {
    proved = ChallengeAndVerify(s, &hello);
    FrontendMessage m;
    m.mutable_shutdown()->set_reason("test");
    s->Write(m);
    WorkerMessage ignored;
    while (s->Read(&ignored)) {
    }
  });
  EXPECT_EQ(RunWorker(&f, absl::Seconds(10)).exit_code, 0);
  EXPECT_TRUE(proved);
  EXPECT_TRUE(hello.has_hello());
  EXPECT_GT(hello.hello().pid(), 0);
  EXPECT_EQ(hello.hello().device(), "cpu");
}

// The frontend's refusal, as the pool answers a wrong proof.
TEST(WorkerBinaryTest, RefusedProofExitsOne) {
  ScriptedFrontend f([](Stream* s) {
    WorkerMessage hello, proof;
    FrontendMessage challenge;
    challenge.mutable_challenge()->set_nonce(std::string(kNonceBytes, '\x01'));
    s->Read(&hello);
    s->Write(challenge);
    s->Read(&proof);
  });
  f.set_status(grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "wrong token"));
  EXPECT_EQ(RunWorker(&f, absl::Seconds(10)).exit_code, 1);
}

// The frontend's end of the pipe the pool hands its spawned ranks.
TEST(WorkerBinaryTest, TokenFromAnInheritedFdIsProved) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  ASSERT_EQ(write(fds[1], kToken, sizeof(kToken) - 1), static_cast<ssize_t>(sizeof(kToken) - 1));
  close(fds[1]);
  bool proved = false;
  ScriptedFrontend f([&](Stream* s) {
    WorkerMessage hello;
    proved = ChallengeAndVerify(s, &hello);
  });
  RunWorker(&f, absl::Seconds(10), {"--worker-token-fd", absl::StrCat(fds[0])},
            /*with_token_flag=*/true);
  close(fds[0]);
  EXPECT_TRUE(proved);
}

TEST(WorkerBinaryTest, StreamEndingMakesTheWorkerExitAtOnce) {
  ScriptedFrontend f([](Stream* s) {
    WorkerMessage hello;
    s->Read(&hello);  // then end the call without an Assignment
  });
  const absl::Time start = absl::Now();
  ChildExit e = RunWorker(&f, absl::Seconds(10));
  EXPECT_NE(e.exit_code, 0);
  EXPECT_NE(e.exit_code, -99);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(WorkerBinaryTest, BadAssignmentIsReportedAsError) {
  WorkerMessage reply;
  ScriptedFrontend f([&](Stream* s) {
    WorkerMessage hello;
    ChallengeAndVerify(s, &hello);
    FrontendMessage m;
    m.mutable_assignment()->set_world_size(1);
    m.mutable_assignment()->set_device("tpu");
    s->Write(m);
    s->Read(&reply);
    WorkerMessage ignored;
    while (s->Read(&ignored)) {
    }
  });
  EXPECT_EQ(RunWorker(&f, absl::Seconds(10)).exit_code, 1);
  ASSERT_TRUE(reply.has_error()) << reply.ShortDebugString();
  EXPECT_EQ(reply.error().code(), static_cast<int>(absl::StatusCode::kUnimplemented));
  EXPECT_NE(reply.error().message().find("tpu"), std::string::npos);
}

TEST(WorkerBinaryTest, BadFlagsAndUnreachableFrontend) {
  absl::StatusOr<pid_t> pid = Spawn({WorkerBinary(), "--no-such-flag"});
  ASSERT_TRUE(pid.ok());
  EXPECT_EQ(TerminateAndReap({*pid}, absl::Seconds(5))[0].exit_code, 2);
  const std::string missing = std::string(std::getenv("TEST_TMPDIR")) + "/no_such_dir/x.sock";
  pid = Spawn({WorkerBinary(), "--frontend", "unix:" + missing});  // no token
  ASSERT_TRUE(pid.ok());
  EXPECT_EQ(TerminateAndReap({*pid}, absl::Seconds(5))[0].exit_code, 2);
  pid = Spawn({WorkerBinary(), "--frontend", "unix:" + missing, "--worker-token-file",
               TokenFile() + ".missing"});
  ASSERT_TRUE(pid.ok());
  EXPECT_EQ(TerminateAndReap({*pid}, absl::Seconds(5))[0].exit_code, 2);
  pid = Spawn({WorkerBinary(), "--frontend", "unix:" + missing, "--connect-timeout-s", "1",
               "--worker-token-file", TokenFile()});
  ASSERT_TRUE(pid.ok());
  EXPECT_EQ(TerminateAndReap({*pid}, absl::Seconds(5))[0].exit_code, 1);
  // The CPU-only worker has no CUDA: --device cuda is a bad command line, at once.
  pid = Spawn({WorkerBinary(), "--frontend", "unix:" + missing, "--device", "cuda:0",
               "--worker-token-file", TokenFile()});
  ASSERT_TRUE(pid.ok());
  EXPECT_EQ(TerminateAndReap({*pid}, absl::Seconds(5))[0].exit_code, 2);
}

}  // namespace
}  // namespace tpserve
