// The OpenAI backend of bench: its URL, request body and SSE reading on recorded
// streams, then whole requests against a real in-process HttpServer that streams
// /v1/completions events at known times (and answers 4xx, stalls or breaks off).
#include "client/openai_bench.h"

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/http/http_server.h"

namespace tpserve {
namespace {

using Json = nlohmann::json;

std::string Event(const Json& data) { return absl::StrCat("data: ", data.dump(), "\n\n"); }

// A chunk as tpserve's /v1/completions streams it with return_token_ids.
std::string TokenEvent(const std::vector<int>& ids) {
  return Event({{"id", "cmpl-1"},
                {"object", "text_completion"},
                {"model", "demo"},
                {"choices",
                 {{{"index", 0}, {"text", "x"}, {"finish_reason", nullptr}, {"token_ids", ids}}}},
                {"usage", nullptr}});
}

std::string UsageEvent(int cached) {
  return Event({{"choices", Json::array()},
                {"usage",
                 {{"prompt_tokens", 8},
                  {"completion_tokens", 7},
                  {"prompt_tokens_details", {{"cached_tokens", cached}}}}}});
}

constexpr char kDone[] = "data: [DONE]\n\n";

// 7 tokens in 4 chunks (and one chunk of text only), the usage, [DONE]; a comment and
// CRLF line ends on the way.
std::string Recorded() {
  std::string crlf = TokenEvent({3, 4});
  crlf.replace(crlf.size() - 2, 2, "\r\n\r\n");
  return absl::StrCat(": keep-alive\n\n", TokenEvent({1}), TokenEvent({}), crlf,
                      TokenEvent({5, 6}), TokenEvent({7, 8}), UsageEvent(5), kDone);
}

TEST(OpenAiUrlTest, TakesHostPortAndBasePath) {
  absl::StatusOr<OpenAiUrl> url = ParseOpenAiUrl("http://127.0.0.1:8000");
  ASSERT_TRUE(url.ok()) << url.status();
  EXPECT_EQ(url->host, "127.0.0.1");
  EXPECT_EQ(url->port, "8000");
  EXPECT_EQ(url->completions_path, "/v1/completions");
  EXPECT_EQ(ParseOpenAiUrl("http://h:1/v1/")->completions_path, "/v1/completions");
  EXPECT_EQ(ParseOpenAiUrl("http://h:1/proxy/v1")->completions_path, "/proxy/v1/completions");
  EXPECT_EQ(ParseOpenAiUrl("http://[::1]:9/")->host, "::1");
  EXPECT_EQ(ParseOpenAiUrl("http://localhost")->port, "80");
  for (const char* bad : {"https://h:1", "h:1", "http://:1", "http://h:", "http://h:0",
                          "http://h:70000", "http://h:+1", "http://[::1", "http://u@h:1",
                          "http://h:1/v1?x=1"}) {
    absl::StatusOr<OpenAiUrl> parsed = ParseOpenAiUrl(bad);
    EXPECT_FALSE(parsed.ok()) << bad;
    EXPECT_NE(parsed.status().message().find("--openai-url"), std::string::npos) << bad;
  }
}

TEST(CompletionBodyTest, AsksForTheBenchmarksStream) {
  BenchOptions o;
  o.output_len = 64;
  o.temperature = 0.5f;
  o.seed = ~0ULL;
  const Json body = Json::parse(CompletionBody({{7, 8, 9}, 64}, o, "demo"));
  EXPECT_EQ(body["model"], "demo");
  EXPECT_EQ(body["prompt"], Json({7, 8, 9}));
  EXPECT_EQ(body["max_tokens"], 64);
  EXPECT_EQ(body["ignore_eos"], true);
  EXPECT_EQ(body["temperature"], 0.5);
  EXPECT_EQ(body["seed"], -1);  // the same 64 bits as the gRPC path's seed
  EXPECT_EQ(body["stream"], true);
  EXPECT_EQ(body["stream_options"], Json({{"include_usage", true}}));
  EXPECT_EQ(body["return_token_ids"], true);
  EXPECT_FALSE(Json::parse(CompletionBody({{1}, 64}, o, "")).contains("model"));
}

TEST(SseSplitterTest, SameEventsHoweverTheBytesAreSplit) {
  const std::string stream = Recorded();
  SseSplitter whole;
  const std::vector<std::string> expected = whole.Feed(stream);
  ASSERT_EQ(expected.size(), 7u);  // the comment's empty event is no event
  EXPECT_EQ(expected.back(), "[DONE]");
  EXPECT_EQ(Json::parse(expected[2])["choices"][0]["token_ids"], Json({3, 4}));  // CRLF
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    SseSplitter split;
    std::vector<std::string> events = split.Feed(stream.substr(0, cut));
    for (std::string& e : split.Feed(stream.substr(cut))) events.push_back(std::move(e));
    ASSERT_EQ(events, expected) << "split at " << cut;
  }
  SseSplitter bytewise;
  std::vector<std::string> events;
  for (char c : stream) {
    for (std::string& e : bytewise.Feed(std::string(1, c))) events.push_back(std::move(e));
  }
  EXPECT_EQ(events, expected);
}

TEST(SseSplitterTest, JoinsDataLinesAndSkipsOtherFields) {
  SseSplitter sse;
  EXPECT_EQ(sse.Feed("event: x\ndata: a\ndata:b\nid: 1\n\ndata\n\nretry: 5\n\n"),
            (std::vector<std::string>{"a\nb", ""}));
  EXPECT_TRUE(sse.Feed("data: unfinished\n").empty());
}

RequestTiming Read(const std::string& stream, size_t piece, std::string* error_code) {
  RequestTiming t;
  RequestClock clock;
  CompletionStream reader(&clock);
  for (size_t i = 0; i < stream.size(); i += piece) reader.Feed(stream.substr(i, piece), &t);
  *error_code = reader.ErrorCode();
  return t;
}

TEST(CompletionStreamTest, CountsTokenIdsAsTheGrpcPathDoes) {
  for (size_t piece : {1, 7, 4096}) {
    std::string error;
    const RequestTiming t = Read(Recorded(), piece, &error);
    EXPECT_EQ(error, "");
    EXPECT_EQ(t.output_tokens, 7);
    EXPECT_EQ(t.itl_s.size(), 3u);  // 4 chunks with tokens; the text-only one is no gap
    EXPECT_EQ(t.cached_prompt_tokens, 5);
  }
}

TEST(CompletionStreamTest, NamesWhatWentWrong) {
  std::string error;
  Read(absl::StrCat(TokenEvent({1}), UsageEvent(0)), 4096, &error);
  EXPECT_EQ(error, "INCOMPLETE_STREAM");
  Read(absl::StrCat(TokenEvent({1}), Event({{"error", {{"message", "boom"}}}}), kDone), 4096,
       &error);
  EXPECT_EQ(error, "STREAM_ERROR");
  const RequestTiming t = Read(absl::StrCat("data: {not json\n\n", TokenEvent({1}), kDone), 3, &error);
  EXPECT_EQ(error, "BAD_EVENT");
  EXPECT_EQ(t.output_tokens, 0);  // nothing counts after a bad event
  // A server that streams text without token ids is not timed as producing nothing.
  Read(absl::StrCat(TokenEvent({}), TokenEvent({}), UsageEvent(0), kDone), 4096, &error);
  EXPECT_EQ(error, "TOKEN_IDS_MISSING");  // usage says 7
  Read(absl::StrCat(TokenEvent({1, 2}), UsageEvent(0), kDone), 4096, &error);
  EXPECT_EQ(error, "TOKEN_IDS_MISSING");  // 2 of 7
  Read(absl::StrCat(TokenEvent({}), kDone), 4096, &error);
  EXPECT_EQ(error, "NO_TOKEN_IDS");  // and no usage to say how many
  Read(absl::StrCat(TokenEvent({4}), kDone), 4096, &error);
  EXPECT_EQ(error, "");  // ids without usage: counted as sent
}

// POST /v1/completions on a real HttpServer. By the request's "model": "" streams
// Recorded()'s tokens at known times (TTFT 100 ms, then 50 ms gaps), "missing" answers
// 404, "stall" never answers, "break" stops mid-stream.
class OpenAiBenchServerTest : public ::testing::Test {
 protected:
  static constexpr absl::Duration kFirst = absl::Milliseconds(100);
  static constexpr absl::Duration kGap = absl::Milliseconds(50);

  void SetUp() override {
    HttpRoutes routes;
    routes.Add("POST", "/v1/completions",
               [this](HttpRequest request, std::shared_ptr<HttpResponder> responder) {
                 Handle(std::move(request), std::move(responder));
               });
    absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start({}, routes);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }

  void TearDown() override {
    absl::MutexLock lock(&mu_);
    for (std::thread& t : streams_) t.join();
    server_->Stop();
  }

  void Handle(HttpRequest request, std::shared_ptr<HttpResponder> responder) {
    absl::MutexLock lock(&mu_);
    requests_.push_back(request);
    const std::string model = Json::parse(request.body).value("model", "");
    if (model == "missing") {
      responder->Respond({404, "application/json", R"({"error": {"message": "no such model"}})"});
    } else if (model == "stall") {
      stalled_.push_back(std::move(responder));
    } else {
      streams_.emplace_back([responder, cut = model == "break"] { Stream(*responder, cut); });
    }
  }

  static void Stream(HttpResponder& r, bool cut) {
    r.StartStream(200, "text/event-stream", {{"Cache-Control", "no-cache"}});
    absl::SleepFor(kFirst);
    r.Write(TokenEvent({1}));
    if (cut) return;  // dropping the responder mid-stream closes the connection
    r.Write(TokenEvent({}));
    for (const std::vector<int>& ids : {std::vector<int>{3, 4}, {5, 6}, {7, 8}}) {
      absl::SleepFor(kGap);
      r.Write(TokenEvent(ids));
    }
    r.Write(UsageEvent(5));
    r.Write(kDone);
    r.End();
  }

  RequestTimer Timer(const std::string& model, absl::Duration timeout = absl::Seconds(10)) {
    BenchOptions o;
    o.backend = BenchBackend::kOpenAi;
    o.openai_url = absl::StrCat("http://127.0.0.1:", server_->port());
    o.api_key = "sk-test";
    o.output_len = 7;
    absl::StatusOr<RequestTimer> timer = OpenAiTimer(o, model, timeout);
    EXPECT_TRUE(timer.ok()) << timer.status();
    return timer.ok() ? *timer : RequestTimer();
  }

  std::unique_ptr<HttpServer> server_;
  absl::Mutex mu_;
  std::vector<HttpRequest> requests_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> streams_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<HttpResponder>> stalled_ ABSL_GUARDED_BY(mu_);
};

TEST_F(OpenAiBenchServerTest, TimesTheStreamAsItArrives) {
  const RequestTiming t = Timer("")({{11, 12, 13}, 7});
  EXPECT_TRUE(t.ok) << t.error_code;
  EXPECT_EQ(t.output_tokens, 7);
  EXPECT_EQ(t.cached_prompt_tokens, 5);
  const double first = absl::ToDoubleSeconds(kFirst), gap = absl::ToDoubleSeconds(kGap);
  EXPECT_GE(t.ttft_s, first);
  EXPECT_LT(t.ttft_s, first + 0.5);
  ASSERT_EQ(t.itl_s.size(), 3u);
  for (double itl : t.itl_s) {
    EXPECT_GE(itl, gap * 0.9);  // seen as each event came, not all at the end
    EXPECT_LT(itl, gap + 0.5);
  }
  EXPECT_GE(t.e2e_s, first + 3 * gap);

  absl::MutexLock lock(&mu_);
  ASSERT_EQ(requests_.size(), 1u);
  const HttpRequest& r = requests_[0];
  EXPECT_EQ(r.header("Authorization").value_or(""), "Bearer sk-test");
  EXPECT_EQ(r.header("Content-Type").value_or(""), "application/json");
  const Json body = Json::parse(r.body);
  EXPECT_EQ(body["prompt"], Json({11, 12, 13}));
  EXPECT_EQ(body["max_tokens"], 7);
  EXPECT_FALSE(body.contains("model"));
}

TEST_F(OpenAiBenchServerTest, RunBenchReportsOverHttp) {
  BenchOptions o;
  o.num_prompts = 4;
  o.input_len = 8;
  o.output_len = 7;
  const std::vector<BenchPrompt> prompts = RandomDataset(o, o.num_prompts, 100, o.seed);
  const BenchReport ok = *RunBench(o, prompts, {}, Timer(""));
  EXPECT_EQ(ok.completed, 4);
  EXPECT_EQ(ok.failed, 0);
  EXPECT_EQ(ok.output_tokens, 28);
  EXPECT_EQ(ok.cached_prompt_tokens, 20);
  EXPECT_GE(ok.ttft_ms.median, 100);
  EXPECT_GE(ok.itl_ms.median, 45);

  const BenchReport failed = *RunBench(o, prompts, {}, Timer("missing"));
  EXPECT_EQ(failed.completed, 0);
  EXPECT_EQ(failed.failed, 4);
  EXPECT_EQ(failed.errors, (std::map<std::string, int>{{"HTTP 404", 4}}));
  EXPECT_NE(ReportText(failed).find("HTTP 404: 4"), std::string::npos);
}

TEST_F(OpenAiBenchServerTest, AStalledCallEndsAtItsDeadline) {
  const RequestTiming t = Timer("stall", absl::Milliseconds(300))({{1}, 7});
  EXPECT_FALSE(t.ok);
  EXPECT_EQ(t.error_code, "TIMEOUT");
  EXPECT_GE(t.e2e_s, 0.3);
  EXPECT_LT(t.e2e_s, 3.0);
}

TEST_F(OpenAiBenchServerTest, AStreamBrokenOffFails) {
  const RequestTiming t = Timer("break")({{1}, 7});
  EXPECT_FALSE(t.ok);
  EXPECT_EQ(t.error_code, "CONNECTION_ERROR");
  EXPECT_EQ(t.output_tokens, 1);
}

TEST_F(OpenAiBenchServerTest, NoServerIsAConnectFailure) {
  const RequestTimer timer = Timer("");
  server_->Stop();  // its port now refuses connections
  const RequestTiming t = timer({{1}, 7});
  EXPECT_FALSE(t.ok);
  EXPECT_EQ(t.error_code, "CONNECT_FAILED");
}

}  // namespace
}  // namespace tpserve
