// WorkerPool against a worker that breaks worker.proto: a scripted external worker (a
// real gRPC client of WorkerControl) says Hello, takes its Assignment, and then does one
// wrong thing. Each must fail the start or the step with a status that says what broke —
// never crash the frontend, accept the message, or hang.
#include <unistd.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/pool/worker_pool.h"
#include "tpserve/v1/protocol_version.h"
#include "tpserve/v1/worker.grpc.pb.h"

namespace tpserve {
namespace {

using worker::v1::FrontendMessage;
using worker::v1::WorkerMessage;
using ClientStream = grpc::ClientReaderWriter<WorkerMessage, FrontendMessage>;

// What the scripted worker does after Hello and its Assignment.
using Script = std::function<void(ClientStream*)>;

class RogueWorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/tpserve_rogue_XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
  }
  void TearDown() override {
    if (worker_.joinable()) worker_.join();
    rmdir(dir_.c_str());
  }

  WorkerPoolOptions Options() const {
    WorkerPoolOptions o;
    o.model_dir = "/models/not-read-by-the-scripted-worker";
    o.tp = 1;
    o.spawn_workers = false;
    o.control_address = absl::StrCat("unix:", dir_, "/control.sock");
    o.kv_num_blocks = 16;
    o.start_timeout = absl::Seconds(10);
    o.step_timeout = absl::Seconds(5);
    o.stop_grace = absl::Milliseconds(200);
    return o;
  }

  // Starts the scripted worker: it dials in (retrying until the pool listens), says
  // Hello with `version`, reads its Assignment, then runs `script`; it ends its stream
  // when the frontend does.
  void Attach(Script script, int version = kWorkerProtocolVersion) {
    const std::string address = Options().control_address;
    worker_ = std::thread([address, version, script] {
      auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
      channel->WaitForConnected(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
      auto stub = worker::v1::WorkerControl::NewStub(channel);
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
      std::unique_ptr<ClientStream> stream = stub->Attach(&context);
      WorkerMessage hello;
      hello.mutable_hello()->set_protocol_version(version);
      hello.mutable_hello()->set_pid(getpid());
      if (!stream->Write(hello)) return;
      FrontendMessage assignment;
      if (!stream->Read(&assignment) || !assignment.has_assignment()) return;
      script(stream.get());
      FrontendMessage rest;
      while (stream->Read(&rest)) {
      }
    });
  }

  static void Send(ClientStream* s, const WorkerMessage& m) { s->Write(m); }
  static WorkerMessage Ready(int blocks) {
    WorkerMessage m;
    m.mutable_ready()->set_num_kv_blocks(blocks);
    return m;
  }
  // A worker that sends Ready, waits for its first plan, then does `wrong` with it.
  static Script AfterFirstPlan(std::function<void(ClientStream*, uint64_t step)> wrong) {
    return [wrong](ClientStream* s) {
      Send(s, Ready(16));
      FrontendMessage plan;
      if (s->Read(&plan)) wrong(s, plan.step_plan().step());
    };
  }
  static WorkerMessage Error(absl::StatusCode code, const std::string& text, uint64_t step = 0) {
    WorkerMessage m;
    m.mutable_error()->set_code(static_cast<int>(code));
    m.mutable_error()->set_message(text);
    m.mutable_error()->set_step(step);
    return m;
  }
  static worker::v1::StepPlan Plan() {
    worker::v1::StepPlan plan;
    plan.set_step(1);
    return plan;
  }

  void ExpectStartFails(const std::string& text) {
    const absl::Time start = absl::Now();
    absl::StatusOr<std::unique_ptr<WorkerPool>> pool = WorkerPool::Start(Options());
    ASSERT_FALSE(pool.ok());
    EXPECT_NE(pool.status().message().find(text), std::string::npos) << pool.status();
    EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << "failed only at the start timeout";
  }

  // Starts a pool whose worker has sent Ready, runs one step, and expects it to fail
  // with `text` well before the step deadline.
  void ExpectStepFails(const std::string& text) {
    absl::StatusOr<std::unique_ptr<WorkerPool>> pool = WorkerPool::Start(Options());
    ASSERT_TRUE(pool.ok()) << pool.status();
    const absl::Time start = absl::Now();
    absl::StatusOr<worker::v1::StepResult> result = (*pool)->RunStep(Plan());
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable) << result.status();
    EXPECT_NE(result.status().message().find(text), std::string::npos) << result.status();
    EXPECT_LT(absl::Now() - start, absl::Seconds(4)) << result.status();
    EXPECT_FALSE((*pool)->healthy());
  }

  std::string dir_;
  std::thread worker_;
};

TEST_F(RogueWorkerTest, OtherProtocolVersionFailsTheStart) {
  Attach([](ClientStream*) {}, kWorkerProtocolVersion + 1);
  ExpectStartFails("speaks protocol");
}

TEST_F(RogueWorkerTest, ReadyWithoutBlocksFailsTheStart) {
  Attach([](ClientStream* s) { Send(s, Ready(0)); });
  ExpectStartFails("broke the protocol");
}

TEST_F(RogueWorkerTest, ErrorAtLoadFailsTheStartWithItsMessage) {
  Attach([](ClientStream* s) {
    Send(s, Error(absl::StatusCode::kNotFound, "no such model"));
  });
  ExpectStartFails("no such model");
}

TEST_F(RogueWorkerTest, ResultForAnotherStepFailsTheStep) {
  Attach(AfterFirstPlan([](ClientStream* s, uint64_t step) {
    WorkerMessage m;
    m.mutable_step_result()->set_step(step + 7);
    Send(s, m);
  }));
  ExpectStepFails("broke the protocol");
}

TEST_F(RogueWorkerTest, SecondReadyWhileServingFailsTheStep) {
  Attach(AfterFirstPlan([](ClientStream* s, uint64_t) {
    Send(s, Ready(16));
  }));
  ExpectStepFails("broke the protocol");
}

TEST_F(RogueWorkerTest, ErrorMidStepFailsTheStepWithItsMessage) {
  Attach(AfterFirstPlan([](ClientStream* s, uint64_t step) {
    Send(s, Error(absl::StatusCode::kInternal, "collective timed out", step));
  }));
  ExpectStepFails("collective timed out");
}

TEST_F(RogueWorkerTest, SecondHelloFailsTheStep) {
  Attach(AfterFirstPlan([](ClientStream* s, uint64_t) {
    WorkerMessage hello;
    hello.mutable_hello()->set_protocol_version(kWorkerProtocolVersion);
    Send(s, hello);
  }));
  ExpectStepFails("broke the protocol");
}

TEST_F(RogueWorkerTest, StreamClosedMidStepFailsTheStep) {
  Attach(AfterFirstPlan([](ClientStream* s, uint64_t) {
    s->WritesDone();
  }));
  ExpectStepFails("closed its stream");
}

}  // namespace
}  // namespace tpserve
