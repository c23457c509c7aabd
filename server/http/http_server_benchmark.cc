// Scrape latency of HttpServer with idle connections open (docs/perf.md).
//
// For each count in --idle: starts the server as main.cc does (HttpServer::Start(host,
// port, handler), a --body-bytes metrics page), opens that many TCP connections that
// send nothing (non-blocking connects, so a full accept queue does not stall the
// benchmark), then times --scrapes sequential scrapes, each a new connection sending
// "GET /metrics" with "Connection: close" and reading the whole response. A scrape
// with no answer within --timeout-s ends that count's run. The first scrape is the one
// that meets every idle connection still open (a server may close them meanwhile). It
// uses only the API that the hand-written server had too, so one file measures both.
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "server/http/http_server.h"
#include "server/http/http_test_client.h"

ABSL_FLAG(std::string, idle, "0,100", "counts of idle connections, comma-separated");
ABSL_FLAG(int, scrapes, 50, "scrapes per count");
ABSL_FLAG(int, body_bytes, 8192, "size of the metrics page");
ABSL_FLAG(int, timeout_s, 30, "how long one scrape may take");
ABSL_FLAG(std::string, label, "", "the first column of each row");

namespace tpserve {
namespace {

// A connection to 127.0.0.1:port that is being made or made, and never used.
int OpenIdle(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));  // EINPROGRESS or done
  return fd;
}

struct Run {
  std::vector<absl::Duration> answered;  // each scrape's time, in order
  bool timed_out = false;
};

Run Measure(int idle_count, const std::string& body) {
  absl::StatusOr<std::unique_ptr<HttpServer>> server =
      HttpServer::Start("127.0.0.1", 0, [&body](absl::string_view path) {
        if (path != "/metrics") return HttpResponse{404, "text/plain", "not found\n"};
        return HttpResponse{200, "text/plain; version=0.0.4", body};
      });
  if (!server.ok()) {
    std::fprintf(stderr, "%s\n", server.status().ToString().c_str());
    std::exit(1);
  }
  const int port = (*server)->port();
  std::vector<int> idle;
  for (int i = 0; i < idle_count; ++i) idle.push_back(OpenIdle(port));
  absl::SleepFor(absl::Milliseconds(200));
  Run run;
  const absl::Duration timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  for (int i = 0; i < absl::GetFlag(FLAGS_scrapes); ++i) {
    const absl::Time start = absl::Now();
    RawHttpConnection scrape(port, timeout);
    const bool sent =
        scrape.Send("GET /metrics HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n");
    const RawHttpResponse r = scrape.ReadResponse();
    if (!sent || !r.complete || r.status != 200 || r.body.size() != body.size()) {
      run.timed_out = true;
      break;
    }
    run.answered.push_back(absl::Now() - start);
  }
  for (const int fd : idle) close(fd);
  return run;
}

std::string Millis(absl::Duration d) {
  return absl::StrFormat("%.2f", absl::ToDoubleMilliseconds(d));
}

// | label | idle | answered | first ms | median ms | max ms |; a scrape over the timeout
// is the max (and the first when no scrape was answered).
std::string Row(const std::string& label, int idle_count, Run run) {
  const std::string over = absl::StrFormat("> %d s", absl::GetFlag(FLAGS_timeout_s));
  const std::string first = run.answered.empty() ? over : Millis(run.answered.front());
  std::sort(run.answered.begin(), run.answered.end());
  const std::string median =
      run.answered.empty() ? "-" : Millis(run.answered[run.answered.size() / 2]);
  const std::string max = run.timed_out ? over : Millis(run.answered.back());
  return absl::StrFormat("| %s | %d | %d/%d | %s | %s | %s |", label, idle_count,
                         run.answered.size(), absl::GetFlag(FLAGS_scrapes), first, median, max);
}

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string body(static_cast<size_t>(absl::GetFlag(FLAGS_body_bytes)), '#');
  std::printf(
      "| server | idle connections | scrapes answered | first ms | median ms | max ms |\n"
      "|---|---|---|---|---|---|\n");
  for (absl::string_view count : absl::StrSplit(absl::GetFlag(FLAGS_idle), ',')) {
    int idle_count = 0;
    if (!absl::SimpleAtoi(count, &idle_count) || idle_count < 0) {
      std::fprintf(stderr, "--idle: %s is not a count\n", std::string(count).c_str());
      return 2;
    }
    std::printf("%s\n", tpserve::Row(absl::GetFlag(FLAGS_label), idle_count,
                                     tpserve::Measure(idle_count, body))
                            .c_str());
    std::fflush(stdout);
  }
  return 0;
}
