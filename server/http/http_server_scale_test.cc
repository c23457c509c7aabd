// 1,000 concurrent streaming connections on a server with two I/O threads: every one
// receives all its events while the process keeps a handful of threads.
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/http/http_server.h"
#include "server/http/http_test_client.h"

namespace tpserve {
namespace {

constexpr int kStreams = 1000;
constexpr int kEvents = 10;

// Each stream takes two descriptors here (the client's and the server's).
void RaiseDescriptorLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= 4 * kStreams) return;
  limit.rlim_cur = std::min<rlim_t>(limit.rlim_max, 4 * kStreams);
  setrlimit(RLIMIT_NOFILE, &limit);
}

size_t Count(absl::string_view haystack, absl::string_view needle) {
  size_t count = 0;
  for (size_t at = haystack.find(needle); at != absl::string_view::npos;
       at = haystack.find(needle, at + needle.size())) {
    ++count;
  }
  return count;
}

TEST(HttpServerScaleTest, ThousandStreamsOnTwoIoThreads) {
  RaiseDescriptorLimit();
  absl::Mutex mu;
  std::vector<std::shared_ptr<HttpResponder>> streams;
  HttpRoutes routes;
  routes.Add("GET", "/events", [&](HttpRequest, std::shared_ptr<HttpResponder> responder) {
    responder->StartStream(200, "text/event-stream");
    absl::MutexLock lock(&mu);
    streams.push_back(std::move(responder));
  });
  HttpServerConfig config;
  config.io_threads = 2;
  absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start(config, routes);
  ASSERT_TRUE(server.ok()) << server.status();

  // The producer: once every stream is open, kEvents events to each, then the end.
  int threads_while_open = 0;
  std::thread producer([&] {
    absl::MutexLock lock(&mu);
    if (!mu.AwaitWithTimeout(absl::Condition(
                                 +[](decltype(streams)* s) { return s->size() == kStreams; },
                                 &streams),
                             absl::Seconds(10))) {
      return;
    }
    threads_while_open = ThreadCount();
    const std::string padding(80, 'x');
    for (int event = 0; event < kEvents; ++event) {
      for (auto& stream : streams) stream->Write(absl::StrCat("data: ", event, " ", padding, "\n\n"));
      mu.Unlock();
      absl::SleepFor(absl::Milliseconds(20));
      mu.Lock();
    }
    for (auto& stream : streams) stream->End();
  });

  const absl::Time start = absl::Now();
  std::vector<std::string> received(kStreams);
  ConcurrentStreams clients((*server)->port(), kStreams,
                            "GET /events HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
  const int ended = clients.Run(absl::Now() + absl::Seconds(15), [&](int i, absl::string_view data) {
    received[static_cast<size_t>(i)].append(data.data(), data.size());
  });
  producer.join();
  std::printf("%d streams, %d events each: %.0f ms, %d threads while open\n", kStreams, kEvents,
              absl::ToDoubleMilliseconds(absl::Now() - start), threads_while_open);
  EXPECT_EQ(ended, kStreams);
  int complete = 0;
  for (const std::string& bytes : received) {
    complete += Count(bytes, "data: ") == kEvents && absl::EndsWith(bytes, "\r\n0\r\n\r\n") ? 1 : 0;
  }
  EXPECT_EQ(complete, kStreams);
  EXPECT_GT(threads_while_open, 0);
  EXPECT_LT(threads_while_open, 20);
}

}  // namespace
}  // namespace tpserve
