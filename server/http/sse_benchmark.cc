// N concurrent Server-Sent Events streams, served side by side in one run by
//   - HttpServer (Boost.Beast, asynchronous, --io_threads I/O threads), and
//   - the design it replaced: cpp-httplib with a thread per connection, at most
//     --legacy_threads of them (256 was tpserve's cap), kept only here;
// then prints, per server: streams that received every event, the process's peak
// thread count and resident memory above the run's start, and event delivery latency.
//
// Each stream receives --events events of --event_bytes, the k-th due at
// t0 + k / --rate for every stream (t0: once all streams are open, or 3 s after the
// server started). An event carries its due time; its latency is the time from then
// until the client has read it, so a stream that waits for a thread shows it too.
// The clients are non-blocking sockets on one thread (ConcurrentStreams); a sampler
// thread reads /proc/self every 20 ms. Loopback, in-process.
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <httplib.h>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "server/http/http_server.h"
#include "server/http/http_test_client.h"

ABSL_FLAG(int, streams, 1000, "concurrent SSE streams");
ABSL_FLAG(int, events, 20, "events per stream");
ABSL_FLAG(double, rate, 10, "events per second on each stream");
ABSL_FLAG(int, event_bytes, 100, "bytes per event");
ABSL_FLAG(int, io_threads, 2, "HttpServer's I/O threads");
ABSL_FLAG(std::string, legacy_threads, "256,1000",
          "cpp-httplib runs, each with this many connection threads (comma-separated)");
ABSL_FLAG(int, timeout_s, 30, "how long the clients of one run wait for their streams");

namespace tpserve {
namespace {

constexpr absl::Duration kOpenWait = absl::Seconds(3);
constexpr char kRequest[] = "GET /events HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n";

// The events' due times, shared by the server's writers.
class Schedule {
 public:
  Schedule(int streams, double rate) : streams_(streams), interval_(absl::Seconds(1) / rate) {}

  void Opened() {
    absl::MutexLock lock(&mu_);
    ++opened_;
  }
  // Starts the clock once every stream is open or after kOpenWait.
  void Start() {
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(this, &Schedule::AllOpen), kOpenWait);
    t0_ = absl::Now();
  }
  // Blocks until the clock has started and `event` is due; its due time.
  absl::Time WaitFor(int event) {
    absl::Time due;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &Schedule::Started));
      due = *t0_ + event * interval_;
    }
    absl::SleepFor(due - absl::Now());
    return due;
  }

 private:
  bool AllOpen() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return opened_ >= streams_; }
  bool Started() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return t0_.has_value(); }

  const int streams_;
  const absl::Duration interval_;
  absl::Mutex mu_;
  int opened_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<absl::Time> t0_ ABSL_GUARDED_BY(mu_);
};

std::string Event(absl::Time due) {
  std::string event = absl::StrCat("data: ", absl::ToUnixNanos(due), " ");
  const size_t size = static_cast<size_t>(absl::GetFlag(FLAGS_event_bytes));
  event.append(size > event.size() + 2 ? size - event.size() - 2 : 0, 'x');
  return event + "\n\n";
}

// The process's peak thread count and resident memory while it runs.
class Sampler {
 public:
  Sampler() : base_kib_(ResidentKiB()), thread_([this] { Loop(); }) {}
  ~Sampler() { Finish(); }
  void Finish() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  int peak_threads() const { return peak_threads_; }
  double peak_mib() const { return static_cast<double>(peak_kib_ - base_kib_) / 1024; }

 private:
  void Loop() {
    while (!stop_) {
      peak_threads_ = std::max(peak_threads_.load(), ThreadCount());
      peak_kib_ = std::max(peak_kib_.load(), ResidentKiB());
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
  const long base_kib_;
  std::atomic<bool> stop_{false};
  std::atomic<int> peak_threads_{0};
  std::atomic<long> peak_kib_{0};
  std::thread thread_;
};

struct Result {
  std::string server;
  int complete = 0;  // streams with every event
  long events = 0;
  int threads = 0;
  double mib = 0;
  std::vector<int64_t> latency_us;
};

// Reads every stream of the server on `port`, timing each event against its due time.
void ReadStreams(int port, Result* result) {
  const int streams = absl::GetFlag(FLAGS_streams);
  std::vector<std::string> pending(static_cast<size_t>(streams));
  std::vector<int> received(static_cast<size_t>(streams), 0);
  ConcurrentStreams clients(port, streams, kRequest);
  clients.Run(absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_timeout_s)),
              [&](int i, absl::string_view data) {
                const int64_t now = absl::GetCurrentTimeNanos();
                std::string& buffer = pending[static_cast<size_t>(i)];
                buffer.append(data.data(), data.size());
                size_t start;
                size_t end;
                while ((start = buffer.find("data: ")) != std::string::npos &&
                       (end = buffer.find("\n\n", start)) != std::string::npos) {
                  const std::vector<absl::string_view> fields =
                      absl::StrSplit(absl::string_view(buffer).substr(start + 6), ' ');
                  int64_t due = 0;
                  if (absl::SimpleAtoi(fields[0], &due)) {
                    result->latency_us.push_back((now - due) / 1000);
                    ++received[static_cast<size_t>(i)];
                  }
                  buffer.erase(0, end + 2);
                }
              });
  const int events = absl::GetFlag(FLAGS_events);
  for (const int count : received) {
    result->events += count;
    result->complete += count == events ? 1 : 0;
  }
}

Result RunBeast() {
  const int streams = absl::GetFlag(FLAGS_streams);
  const int events = absl::GetFlag(FLAGS_events);
  Result result{absl::StrCat("HttpServer (Beast), ", absl::GetFlag(FLAGS_io_threads),
                             " I/O threads")};
  Sampler sampler;
  Schedule schedule(streams, absl::GetFlag(FLAGS_rate));
  absl::Mutex mu;
  std::vector<std::shared_ptr<HttpResponder>> open;
  HttpRoutes routes;
  routes.Add("GET", "/events", [&](HttpRequest, std::shared_ptr<HttpResponder> responder) {
    responder->StartStream(200, "text/event-stream", {{"Cache-Control", "no-cache"}});
    {
      absl::MutexLock lock(&mu);
      open.push_back(std::move(responder));
    }
    schedule.Opened();
  });
  HttpServerConfig config;
  config.io_threads = static_cast<size_t>(absl::GetFlag(FLAGS_io_threads));
  config.max_connections = static_cast<size_t>(streams) + 16;
  absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start(config, routes);
  if (!server.ok()) {
    std::fprintf(stderr, "%s\n", server.status().ToString().c_str());
    return result;
  }
  // The generator: one thread writes each due event to every open stream.
  std::thread writer([&] {
    schedule.Start();
    std::vector<std::shared_ptr<HttpResponder>> streams_now;
    for (int event = 0; event < events; ++event) {
      const std::string data = Event(schedule.WaitFor(event));
      {
        absl::MutexLock lock(&mu);
        streams_now = open;
      }
      for (auto& stream : streams_now) stream->Write(data);
    }
    for (auto& stream : streams_now) stream->End();
  });
  ReadStreams((*server)->port(), &result);
  writer.join();
  sampler.Finish();
  (*server)->Stop();
  result.threads = sampler.peak_threads();
  result.mib = sampler.peak_mib();
  return result;
}

// cpp-httplib as tpserve used it, less its timeouts: its accept loop, its parser and a
// thread per connection from a pool of `threads` (connections beyond wait for one).
class LegacyServer final : public httplib::Server {
 public:
  // cpp-httplib listens with a backlog of 5; a burst of connects would wait for SYN
  // retransmits (tpserve raised it the same way).
  void RaiseBacklog() { ::listen(svr_sock_, SOMAXCONN); }
};

Result RunLegacy(int threads) {
  const int streams = absl::GetFlag(FLAGS_streams);
  const int events = absl::GetFlag(FLAGS_events);
  Result result{absl::StrCat("cpp-httplib, thread per connection, at most ", threads)};
  Sampler sampler;
  Schedule schedule(streams, absl::GetFlag(FLAGS_rate));
  LegacyServer server;
  server.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server.Get("/events", [&](const httplib::Request&, httplib::Response& res) {
    schedule.Opened();
    auto next = std::make_shared<int>(0);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream", [&schedule, next, events](size_t, httplib::DataSink& sink) {
          if (*next == events) {
            sink.done();
            return true;
          }
          const std::string data = Event(schedule.WaitFor((*next)++));
          return sink.write(data.data(), data.size());
        });
  });
  const int port = server.bind_to_any_port("127.0.0.1");
  server.RaiseBacklog();
  std::thread accept_loop([&] { server.listen_after_bind(); });
  std::thread clock([&] { schedule.Start(); });
  ReadStreams(port, &result);
  clock.join();
  sampler.Finish();
  server.stop();
  accept_loop.join();
  result.threads = sampler.peak_threads();
  result.mib = sampler.peak_mib();
  return result;
}

double Percentile(const std::vector<int64_t>& sorted, double p) {
  if (sorted.empty()) return 0;
  const size_t at = std::min(sorted.size() - 1, static_cast<size_t>(p * sorted.size()));
  return static_cast<double>(sorted[at]) / 1000;
}

void Print(std::vector<Result> results) {
  const int streams = absl::GetFlag(FLAGS_streams);
  const long expected = static_cast<long>(streams) * absl::GetFlag(FLAGS_events);
  std::printf(
      "| server | streams complete | events received | threads (peak) | RSS +MiB (peak) | "
      "latency p50 ms | p99 ms | max ms |\n|---|---|---|---|---|---|---|---|\n");
  for (Result& r : results) {
    std::sort(r.latency_us.begin(), r.latency_us.end());
    std::printf("| %s | %d/%d | %ld/%ld | %d | %.1f | %.2f | %.2f | %.2f |\n", r.server.c_str(),
                r.complete, streams, r.events, expected, r.threads, r.mib,
                Percentile(r.latency_us, 0.5), Percentile(r.latency_us, 0.99),
                Percentile(r.latency_us, 1.0));
  }
}

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  rlimit limit{};  // two descriptors per stream, client and server
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
  std::vector<tpserve::Result> results;
  results.push_back(tpserve::RunBeast());
  for (const absl::string_view threads : absl::StrSplit(absl::GetFlag(FLAGS_legacy_threads), ',')) {
    int count = 0;
    if (absl::SimpleAtoi(threads, &count) && count > 0) {
      results.push_back(tpserve::RunLegacy(count));
    }
  }
  tpserve::Print(std::move(results));
  return 0;
}
