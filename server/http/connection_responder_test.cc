// ConnectionResponder's state machine against a recording sink: which calls reach the
// connection, the queue bound, OnClose, and what dropping it does.
#include "server/http/connection_responder.h"

#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tpserve {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

class RecordingSink final : public ResponseSink {
 public:
  void SendResponse(HttpResponse response) override {
    calls.push_back("response " + std::to_string(response.status) + " " + response.body);
  }
  void SendStreamHead(int status, std::string content_type, HttpHeaders) override {
    calls.push_back("head " + std::to_string(status) + " " + content_type);
  }
  void SendStreamData(std::string data) override { calls.push_back("data " + data); }
  void SendStreamEnd() override { calls.push_back("end"); }
  void Abort() override { calls.push_back("abort"); }

  std::vector<std::string> calls;
};

TEST(ConnectionResponderTest, RespondsOnceAndIgnoresWhatFollows) {
  RecordingSink sink;
  {
    ConnectionResponder responder(&sink, 100);
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
  RecordingSink sink;
  ConnectionResponder responder(&sink, 100);
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
  RecordingSink sink;
  ConnectionResponder responder(&sink, 10);
  ASSERT_TRUE(responder.StartStream(200, "text/event-stream"));
  EXPECT_TRUE(responder.Write("123456"));
  responder.Sent(6);
  EXPECT_TRUE(responder.Write("1234567890"));  // exactly the bound
  EXPECT_FALSE(responder.Write("1"));          // one more: the client is too slow
  EXPECT_FALSE(responder.Write("1"));
  EXPECT_THAT(sink.calls, ElementsAre("head 200 text/event-stream", "data 123456",
                                      "data 1234567890", "abort"));
}

TEST(ConnectionResponderTest, DetachBeforeTheResponseWasSentRunsOnCloseOnce) {
  RecordingSink sink;
  ConnectionResponder responder(&sink, 100);
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
  RecordingSink sink;
  ConnectionResponder responder(&sink, 100);
  int closes = 0;
  responder.OnClose([&] { ++closes; });
  responder.Respond({});
  responder.Detach(/*response_sent=*/true);
  responder.OnClose([&] { ++closes; });
  EXPECT_EQ(closes, 0);
}

TEST(ConnectionResponderTest, DroppingItUnansweredSends500AndMidStreamAborts) {
  RecordingSink unanswered;
  std::make_unique<ConnectionResponder>(&unanswered, 100).reset();
  ASSERT_EQ(unanswered.calls.size(), 1u);
  EXPECT_EQ(unanswered.calls[0].rfind("response 500 ", 0), 0u);

  RecordingSink streaming;
  {
    ConnectionResponder responder(&streaming, 100);
    responder.StartStream(200, "text/event-stream");
  }
  EXPECT_THAT(streaming.calls, ElementsAre("head 200 text/event-stream", "abort"));

  RecordingSink detached;
  {
    ConnectionResponder responder(&detached, 100);
    responder.Detach(/*response_sent=*/false);
  }
  EXPECT_THAT(detached.calls, IsEmpty());
}

}  // namespace
}  // namespace tpserve
