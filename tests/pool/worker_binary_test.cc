// tpserve_worker's process contract against a scripted frontend: it exits 0 on Shutdown,
// exits at once (3) when the frontend's stream ends, reports a bad Assignment as Error
// and exits 1, and fails cleanly on bad flags or an unreachable frontend.
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/subprocess.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
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
    return grpc::Status::OK;
  }

 private:
  std::function<void(Stream*)> script_;
};

std::string WorkerBinary() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  return absl::StrCat(srcdir ? srcdir : ".", "/tpserve/worker/rank/tpserve_worker");
}

// Serves `frontend` on a fresh Unix socket, runs the worker against it, and returns its
// exit (or -99 if it has not exited within `limit`).
ChildExit RunWorker(ScriptedFrontend* frontend, absl::Duration limit,
                    std::vector<std::string> extra_args = {}) {
  char dir[] = "/tmp/tpserve_worker_XXXXXX";
  if (mkdtemp(dir) == nullptr) return {};
  const std::string address = absl::StrCat("unix:", dir, "/c.sock");
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials());
  builder.RegisterService(frontend);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  std::vector<std::string> argv = {WorkerBinary(), "--frontend", address};
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

TEST(WorkerBinaryTest, ShutdownAfterHelloExitsZero) {
  WorkerMessage hello;
  ScriptedFrontend f([&](Stream* s) {
    s->Read(&hello);
    FrontendMessage m;
    m.mutable_shutdown()->set_reason("test");
    s->Write(m);
    WorkerMessage ignored;
    while (s->Read(&ignored)) {
    }
  });
  EXPECT_EQ(RunWorker(&f, absl::Seconds(10)).exit_code, 0);
  EXPECT_TRUE(hello.has_hello());
  EXPECT_GT(hello.hello().pid(), 0);
  EXPECT_EQ(hello.hello().device(), "cpu");
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
    s->Read(&hello);
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
  pid = Spawn({WorkerBinary(), "--frontend", "unix:" + missing, "--connect-timeout-s", "1"});
  ASSERT_TRUE(pid.ok());
  EXPECT_EQ(TerminateAndReap({*pid}, absl::Seconds(5))[0].exit_code, 1);
}

}  // namespace
}  // namespace tpserve
