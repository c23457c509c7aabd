// WorkerPool against a worker that breaks worker.proto: a scripted external worker (a
// real gRPC client of WorkerControl) says Hello, proves the worker token, takes its
// Assignment, and then does one wrong thing. Each must fail the start or the step with
// a status that says what broke — never crash the frontend, accept the message, or
// hang. A worker that cannot prove the token is refused before any Assignment, and the
// pool goes on waiting for real ones.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <future>
#include <sstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "rendezvous/tcp_store.h"
#include "rendezvous/worker_token.h"
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

// How the scripted worker answers the Challenge.
enum class Answer { kRightToken, kWrongToken, kNoProof };

// What a scripted worker saw of the frontend.
struct Seen {
  bool challenged = false;
  bool assigned = false;
  worker::v1::Assignment assignment;
  grpc::Status status;
};

class RogueWorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/tpserve_rogue_XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    token_ = std::string(64, 'a') + "0123456789";
    std::ofstream(TokenFile()) << token_ << "\n";
    control_address_ = absl::StrCat("unix:", dir_, "/control.sock");
  }
  void TearDown() override {
    if (worker_.joinable()) worker_.join();
    if (rogue_.joinable()) rogue_.join();
    unlink(TokenFile().c_str());
    rmdir(dir_.c_str());
  }

  std::string TokenFile() const { return dir_ + "/token"; }

  WorkerPoolOptions Options() const {
    WorkerPoolOptions o;
    o.model_dir = "/models/not-read-by-the-scripted-worker";
    o.tp = 1;
    o.spawn_workers = false;
    o.control_address = control_address_;
    o.worker_token_file = TokenFile();
    o.kv_num_blocks = 16;
    o.start_timeout = absl::Seconds(10);
    o.step_timeout = absl::Seconds(5);
    o.stop_grace = absl::Milliseconds(200);
    return o;
  }

  // Starts the scripted worker: it dials in (retrying until the pool listens), says
  // Hello with `version`, answers the Challenge with the pool's token, reads its
  // Assignment, then runs `script`; it ends its stream when the frontend does.
  void Attach(Script script, int version = kWorkerProtocolVersion) {
    worker_ = StartWorker(Answer::kRightToken, version, std::move(script), &seen_);
  }

  // `rank`: the rank the worker asks for (Hello.requested_rank), if any.
  std::thread StartWorker(Answer answer, int version, Script script, Seen* seen,
                          std::optional<int> rank = std::nullopt) const {
    const std::string address = Options().control_address;
    const std::string token = answer == Answer::kWrongToken ? std::string(64, 'b') : token_;
    return std::thread([=] {
      auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
      channel->WaitForConnected(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
      auto stub = worker::v1::WorkerControl::NewStub(channel);
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
      std::unique_ptr<ClientStream> stream = stub->Attach(&context);
      if (Join(stream.get(), answer, version, token, rank, seen)) {
        script(stream.get());
      }
      FrontendMessage rest;
      while (stream->Read(&rest)) seen->assigned |= rest.has_assignment();
      seen->status = stream->Finish();
    });
  }

  // Hello → Challenge → the answer → Assignment; true once assigned.
  static bool Join(ClientStream* stream, Answer answer, int version, const std::string& token,
                   std::optional<int> rank, Seen* seen) {
    WorkerMessage hello;
    hello.mutable_hello()->set_protocol_version(version);
    hello.mutable_hello()->set_pid(getpid());
    if (rank.has_value()) hello.mutable_hello()->set_requested_rank(*rank);
    FrontendMessage m;
    if (!stream->Write(hello) || !stream->Read(&m)) return false;
    seen->challenged = m.has_challenge();
    WorkerMessage reply;
    if (answer == Answer::kNoProof) {
      reply.mutable_ready()->set_num_kv_blocks(16);  // skips the Proof
    } else {
      reply.mutable_proof()->set_hmac(
          ProveWorkerToken(token, ProofChannel::kControl, m.challenge().nonce()));
    }
    if (!stream->Write(reply) || !stream->Read(&m)) return false;
    seen->assigned = m.has_assignment();
    seen->assignment = m.assignment();
    return seen->assigned;
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
  std::string token_;
  std::string control_address_;  // where Options() has the pool listen
  std::thread worker_;
  Seen seen_;
  std::thread rogue_;
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

// Workers that name their rank (tpserve_worker --rank) get it whatever order they
// attach in; one asking for a rank already held or out of range is refused with a
// status that says so, takes no rank, and the pool starts with the others.
TEST_F(RogueWorkerTest, RequestedRanksAreHeldAndClashesRefused) {
  WorkerPoolOptions o = Options();
  o.tp = 3;
  absl::StatusOr<std::unique_ptr<WorkerPool>> pool;
  std::thread start([&] { pool = WorkerPool::Start(o); });
  // A worker asking for `rank` that sends Ready once assigned; returns when assigned.
  std::vector<std::thread> ready;
  auto attach = [&](std::optional<int> rank, Seen* seen) {
    auto assigned = std::make_shared<std::promise<void>>();
    ready.push_back(StartWorker(Answer::kRightToken, kWorkerProtocolVersion,
                                [assigned](ClientStream* s) {
                                  assigned->set_value();
                                  Send(s, Ready(16));
                                },
                                seen, rank));
    assigned->get_future().wait();
  };
  // A worker asking for `rank` that must be refused with `code`.
  auto refused = [&](int rank, grpc::StatusCode code, const std::string& text) {
    Seen seen;
    StartWorker(Answer::kRightToken, kWorkerProtocolVersion, [](ClientStream*) {}, &seen, rank)
        .join();
    EXPECT_FALSE(seen.assigned) << rank;
    EXPECT_EQ(seen.status.error_code(), code) << seen.status.error_message();
    EXPECT_NE(seen.status.error_message().find(text), std::string::npos)
        << seen.status.error_message();
  };
  Seen two, any, one;
  attach(2, &two);
  refused(2, grpc::StatusCode::ALREADY_EXISTS, "another worker holds rank 2");
  refused(3, grpc::StatusCode::INVALID_ARGUMENT, "ranks 0 to 2");
  refused(-1, grpc::StatusCode::INVALID_ARGUMENT, "out of range");
  attach(std::nullopt, &any);
  attach(1, &one);
  start.join();
  ASSERT_TRUE(pool.ok()) << pool.status();
  EXPECT_TRUE((*pool)->healthy());
  EXPECT_EQ(two.assignment.rank(), 2);
  EXPECT_EQ(any.assignment.rank(), 0);
  EXPECT_EQ(one.assignment.rank(), 1);
  for (const Seen* seen : {&two, &any, &one}) EXPECT_EQ(seen->assignment.world_size(), 3);
  (*pool)->Shutdown("test done");
  for (std::thread& t : ready) t.join();
}

// Whether /proc/net/tcp{,6} lists a socket listening on `port` only at a loopback
// address (127.0.0.1 or ::1), and at least one.
bool ListensOnLoopbackOnly(int port) {
  const std::string hex_port = absl::StrCat(":", absl::Hex(port, absl::kZeroPad4));
  int loopback = 0, other = 0;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state;
      fields >> slot >> local >> remote >> state;
      if (state != "0A" || !absl::EndsWith(absl::AsciiStrToUpper(local),
                                           absl::AsciiStrToUpper(hex_port))) {
        continue;
      }
      const std::string host = local.substr(0, local.find(':'));
      const bool is_loopback =
          host == "0100007F" || host == "00000000000000000000000001000000";
      (is_loopback ? loopback : other)++;
    }
  }
  return loopback > 0 && other == 0;
}

// Workers that do not prove the token (a wrong one, or none) are refused before any
// Assignment; the pool is unaffected and the real worker that comes next joins.
TEST_F(RogueWorkerTest, WorkersWithoutTheTokenNeverSeeAnAssignment) {
  for (Answer answer : {Answer::kWrongToken, Answer::kNoProof}) {
    Seen rogue;
    std::thread t = StartWorker(answer, kWorkerProtocolVersion, [](ClientStream*) {}, &rogue);
    absl::StatusOr<std::unique_ptr<WorkerPool>> pool;
    std::thread start([&] { pool = WorkerPool::Start(Options()); });
    t.join();
    EXPECT_TRUE(rogue.challenged);
    EXPECT_FALSE(rogue.assigned);
    EXPECT_EQ(rogue.status.error_code(), grpc::StatusCode::UNAUTHENTICATED)
        << rogue.status.error_message();
    Attach([](ClientStream* s) { Send(s, Ready(16)); });
    start.join();
    ASSERT_TRUE(pool.ok()) << pool.status();
    EXPECT_TRUE((*pool)->healthy());
    (*pool)->Shutdown("test done");
    worker_.join();
    EXPECT_TRUE(seen_.assigned);
  }
}

TEST_F(RogueWorkerTest, OnlyRefusedWorkersTimeTheStartOutNamingThem) {
  Seen rogue;
  rogue_ = StartWorker(Answer::kWrongToken, kWorkerProtocolVersion, [](ClientStream*) {}, &rogue);
  WorkerPoolOptions o = Options();
  o.start_timeout = absl::Seconds(2);
  absl::StatusOr<std::unique_ptr<WorkerPool>> pool = WorkerPool::Start(o);
  EXPECT_EQ(pool.status().code(), absl::StatusCode::kDeadlineExceeded) << pool.status();
  EXPECT_NE(pool.status().message().find("refused 1 connection(s) that did not prove the worker "
                                         "token"),
            std::string::npos)
      << pool.status();
  EXPECT_FALSE(rogue.assigned);
}

// The store the Assignment names listens on loopback only (the ranks dial in over a
// Unix socket) and serves only clients that prove the token.
TEST_F(RogueWorkerTest, TheStoreIsOnLoopbackAndRefusesClientsWithoutTheToken) {
  Attach([](ClientStream* s) { Send(s, Ready(16)); });
  absl::StatusOr<std::unique_ptr<WorkerPool>> pool = WorkerPool::Start(Options());
  ASSERT_TRUE(pool.ok()) << pool.status();
  const worker::v1::Assignment& a = seen_.assignment;
  EXPECT_EQ(a.store_host(), "127.0.0.1");
  EXPECT_TRUE(ListensOnLoopbackOnly(a.store_port())) << a.store_port();
  auto none = TcpStoreClient::Connect(a.store_host(), a.store_port(), absl::Seconds(5));
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnauthenticated) << none.status();
  auto wrong = TcpStoreClient::Connect(a.store_host(), a.store_port(), absl::Seconds(5),
                                       std::string(64, 'b'));
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kUnauthenticated) << wrong.status();
  auto right =
      TcpStoreClient::Connect(a.store_host(), a.store_port(), absl::Seconds(5), token_);
  ASSERT_TRUE(right.ok()) << right.status();
  EXPECT_TRUE((*right)->Set(a.store_key_prefix() + "/k", "v").ok());
  (*pool)->Shutdown("test done");
}

// A port of 127.0.0.1 free when asked.
int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    return -1;
  }
  close(fd);
  return ntohs(addr.sin_port);
}

// tpserve --advertise-address: the Assignment names that host for the store (the ranks
// reach the frontend by another name than the one it binds), and the store still
// listens where the control address says (here loopback).
TEST_F(RogueWorkerTest, AssignmentsNameTheAdvertisedStoreHost) {
  const int port = FreeLoopbackPort();
  ASSERT_GT(port, 0);
  control_address_ = absl::StrCat("127.0.0.1:", port);
  WorkerPoolOptions o = Options();
  o.advertise_host = "tpserve-0.tpserve.serving";
  Attach([](ClientStream* s) { Send(s, Ready(16)); });
  absl::StatusOr<std::unique_ptr<WorkerPool>> pool = WorkerPool::Start(o);
  ASSERT_TRUE(pool.ok()) << pool.status();
  EXPECT_EQ(seen_.assignment.store_host(), "tpserve-0.tpserve.serving");
  EXPECT_TRUE(ListensOnLoopbackOnly(seen_.assignment.store_port()));
  (*pool)->Shutdown("test done");
}

}  // namespace
}  // namespace tpserve
