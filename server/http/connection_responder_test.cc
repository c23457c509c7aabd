// ConnectionResponder's state machine against a recording sink: which calls reach the
// connection, the queue bounds (its own and the server's budget), OnClose, and what
// dropping it does.
#include "server/http/connection_responder.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/http/byte_budget.h"

namespace tpserve {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

class RecordingSink final : public ResponseSink {
 public:
  void SendResponse(HttpResponse response, ByteReservation held) override {
    calls.push_back("response " + std::to_string(response.status) + " " + response.body);
    this->held.push_back(std::move(held));
  }
  void SendStreamHead(int status, std::string content_type, HttpHeaders) override {
    calls.push_back("head " + std::to_string(status) + " " + content_type);
  }
  void SendStreamData(std::string data, ByteReservation held) override {
    calls.push_back("data " + data);
    this->held.push_back(std::move(held));
  }
  void SendStreamEnd() override { calls.push_back("end"); }
  void Abort() override { calls.push_back("abort"); }

  std::vector<std::string> calls;
  std::vector<ByteReservation> held;  // as the connection keeps them until sent
};

constexpr size_t kLargeBudget = 1 << 20;

TEST(ConnectionResponderTest, RespondsOnceAndIgnoresWhatFollows) {
  ByteBudget budget(kLargeBudget);
  RecordingSink sink;
  {
    ConnectionResponder responder(&sink, 100, &budget);
    EXPECT_FALSE(responder.closed());
    responder.Respond({201, "text/plain", "made", {}});
    responder.Respond({500, "text/plain", "again", {}});
    EXPECT_FALSE(responder.StartStream(200, "text/event-stream"));
    EXPECT_FALSE(responder.Write("x"));
    EXPECT_TRUE(responder.closed());
  }
  EXPECT_THAT(sink.calls, ElementsAre("response 201 made"));
}

TEST(ConnectionResponderTest, StreamsInOrder) {
  ByteBudget budget(kLargeBudget);
  RecordingSink sink;
  ConnectionResponder responder(&sink, 100, &budget);
  EXPECT_FALSE(responder.Write("early"));
  EXPECT_TRUE(responder.StartStream(200, "text/event-stream"));
  EXPECT_FALSE(responder.StartStream(200, "text/event-stream"));
  EXPECT_TRUE(responder.Write("a"));
  EXPECT_TRUE(responder.Write("b"));
  responder.End();
  EXPECT_FALSE(responder.Write("late"));
  EXPECT_THAT(sink.calls, ElementsAre("head 200 text/event-stream", "data a", "data b", "end"));
}

TEST(ConnectionResponderTest, WriteBeyondTheQueueBoundAbortsUntilSentFreesRoom) {
  ByteBudget budget(kLargeBudget);
  RecordingSink sink;
  ConnectionResponder responder(&sink, 10, &budget);
  ASSERT_TRUE(responder.StartStream(200, "text/event-stream"));
  EXPECT_TRUE(responder.Write("123456"));
  responder.Sent(6);
  EXPECT_TRUE(responder.Write("1234567890"));  // exactly the bound
  EXPECT_FALSE(responder.Write("1"));          // one more: the client is too slow
  EXPECT_FALSE(responder.Write("1"));
  EXPECT_THAT(sink.calls, ElementsAre("head 200 text/event-stream", "data 123456",
                                      "data 1234567890", "abort"));
}

TEST(ConnectionResponderTest, WritesAndBodiesHoldTheSharedBudgetUntilTheSinkDropsThem) {
  ByteBudget budget(10);
  RecordingSink sink_a;
  RecordingSink sink_b;
  ConnectionResponder a(&sink_a, 10, &budget);
  ConnectionResponder b(&sink_b, 10, &budget);
  ASSERT_TRUE(a.StartStream(200, "text/event-stream"));
  ASSERT_TRUE(b.StartStream(200, "text/event-stream"));
  EXPECT_TRUE(a.Write("123456"));
  EXPECT_EQ(budget.held(), 6u);
  EXPECT_FALSE(b.Write("12345"));  // within b's own bound, past the server's
  EXPECT_THAT(sink_b.calls, ElementsAre("head 200 text/event-stream", "abort"));
  EXPECT_TRUE(a.Write("1234"));  // exactly the budget: b's refused write took nothing
  EXPECT_EQ(budget.held(), 10u);
  sink_a.held[0].Release();  // the connection sent "123456"
  a.Sent(6);
  EXPECT_EQ(budget.held(), 4u);

  RecordingSink sink_c;
  ConnectionResponder c(&sink_c, 1, &budget);  // Respond() is bounded by the budget alone
  c.Respond({200, "text/plain", "1234567", {}});
  EXPECT_THAT(sink_c.calls, ElementsAre("abort"));
  RecordingSink sink_d;
  ConnectionResponder d(&sink_d, 1, &budget);
  d.Respond({200, "text/plain", "123456", {}});
  EXPECT_THAT(sink_d.calls, ElementsAre("response 200 123456"));
  EXPECT_EQ(budget.held(), 10u);
  sink_a.held.clear();
  sink_d.held.clear();
  EXPECT_EQ(budget.held(), 0u);
}

TEST(ConnectionResponderTest, DetachBeforeTheResponseWasSentRunsOnCloseOnce) {
  ByteBudget budget(kLargeBudget);
  RecordingSink sink;
  ConnectionResponder responder(&sink, 100, &budget);
  int closes = 0;
  responder.OnClose([&] { ++closes; });
  ASSERT_TRUE(responder.StartStream(200, "text/event-stream"));
  responder.Detach(/*response_sent=*/false);
  responder.Detach(/*response_sent=*/false);
  EXPECT_EQ(closes, 1);
  EXPECT_TRUE(responder.closed());
  EXPECT_FALSE(responder.Write("x"));
  responder.End();
  // Set after the connection ended: runs at once.
  responder.OnClose([&] { ++closes; });
  EXPECT_EQ(closes, 2);
  EXPECT_THAT(sink.calls, ElementsAre("head 200 text/event-stream"));
}

TEST(ConnectionResponderTest, DetachAfterTheResponseWasSentRunsNothing) {
  ByteBudget budget(kLargeBudget);
  RecordingSink sink;
  ConnectionResponder responder(&sink, 100, &budget);
  int closes = 0;
  responder.OnClose([&] { ++closes; });
  responder.Respond({});
  responder.Detach(/*response_sent=*/true);
  responder.OnClose([&] { ++closes; });
  EXPECT_EQ(closes, 0);
}

TEST(ConnectionResponderTest, DroppingItUnansweredSends500AndMidStreamAborts) {
  ByteBudget budget(kLargeBudget);
  RecordingSink unanswered;
  std::make_unique<ConnectionResponder>(&unanswered, 100, &budget).reset();
  ASSERT_EQ(unanswered.calls.size(), 1u);
  EXPECT_EQ(unanswered.calls[0].rfind("response 500 ", 0), 0u);

  RecordingSink streaming;
  {
    ConnectionResponder responder(&streaming, 100, &budget);
    responder.StartStream(200, "text/event-stream");
  }
  EXPECT_THAT(streaming.calls, ElementsAre("head 200 text/event-stream", "abort"));

  RecordingSink detached;
  {
    ConnectionResponder responder(&detached, 100, &budget);
    responder.Detach(/*response_sent=*/false);
  }
  EXPECT_THAT(detached.calls, IsEmpty());
}

}  // namespace
}  // namespace tpserve
