#include "server/http/http_server.h"

#include <fcntl.h>
#include <httplib.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <functional>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "server/http/connection_pool.h"
#include "server/http/connection_stream.h"

namespace tpserve {
namespace {

constexpr char kPlainText[] = "text/plain; charset=utf-8";

// The connection that this thread is serving. cpp-httplib gives its handlers no way to
// reach it, and the post-routing handler must be able to end it.
thread_local ConnectionStream* this_threads_connection = nullptr;

// "127.0.0.1:9090", "[::]:9090".
std::string Address(const std::string& host, int port) {
  return absl::StrContains(host, ':') ? absl::StrCat("[", host, "]:", port)
                                      : absl::StrCat(host, ":", port);
}

// A std::regex (cpp-httplib's routes are patterns) that matches exactly `path`.
std::string ExactPattern(absl::string_view path) {
  std::string pattern;
  for (const char c : path) {
    if (std::strchr("^$\\.*+?()[]{}|", c) != nullptr) pattern += '\\';
    pattern += c;
  }
  return pattern;
}

bool IsValid(const HttpResponse& response) {
  return response.status >= 200 && response.status <= 599 &&
         response.content_type.find_first_of("\r\n") == std::string::npos;
}

httplib::Server::Handler Serve(HttpHandler handler) {
  return [handler = std::move(handler)](const httplib::Request& req, httplib::Response& res) {
    HttpResponse response = handler(req.path);
    if (!IsValid(response)) {
      res.status = 500;
      res.set_content("the handler's response is invalid\n", kPlainText);
      return;
    }
    res.status = response.status;
    res.body = std::move(response.body);
    res.set_header("Content-Type", response.content_type);
  };
}

void RefuseMethod(const httplib::Request&, httplib::Response& res) {
  res.status = 405;
  res.set_header("Allow", "GET, HEAD");
  res.set_content("method not allowed: this path serves GET and HEAD\n", kPlainText);
}

// The body of an error response that has none.
std::string ErrorText(int status) {
  switch (status) {
    case 400:
      return "bad request\n";
    case 404:
      return "not found\n";
    case 413:
      return "request body too large\n";
    case 414:
      return "request target too long\n";
    default:
      return absl::StrCat("HTTP status ", status, "\n");
  }
}

}  // namespace

absl::Status HttpServerConfig::Validate() const {
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("HTTP port ", port, " is not in [0, 65535]"));
  }
  if (max_connections < 1 || max_requests_per_connection < 1 || max_head_bytes < 1) {
    return absl::InvalidArgumentError(
        "HTTP max_connections, max_requests_per_connection and max_head_bytes must be at "
        "least 1");
  }
  if (idle_timeout <= absl::ZeroDuration() || request_timeout <= absl::ZeroDuration() ||
      write_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("HTTP timeouts must be positive");
  }
  return absl::OkStatus();
}

// cpp-httplib's server with HttpServer's connection handling: ConnectionPool threads,
// a ConnectionStream for each connection and the keep-alive loop over it. cpp-httplib
// still parses each request, routes it and writes the response (process_request).
class HttpServer::Listener final : public httplib::Server {
 public:
  Listener(const HttpServerConfig& config, int wake_fd);
  void Route(HttpRoutes routes);
  absl::StatusOr<int> Bind(const std::string& host, int port);
  // The accept loop, until stop(); on the server's thread.
  void Run();
  // cpp-httplib's stop() does nothing before its loop has started.
  void WaitUntilRunning() const;

 private:
  bool process_and_close_socket(socket_t sock) override;

  const HttpServerConfig config_;
  const int wake_fd_;
  std::atomic<std::thread::id> accept_thread_;
  std::atomic<bool> finished_{false};
};

HttpServer::Listener::Listener(const HttpServerConfig& config, int wake_fd)
    : config_(config), wake_fd_(wake_fd) {
  // cpp-httplib's default adds SO_REUSEPORT, with which a second server on the same
  // port would start and take half of the connections instead of failing.
  set_socket_options([](socket_t sock) {
    const int one = 1;  // A restart must not wait out the last run's TIME_WAIT sockets.
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  });
  new_task_queue = [max = config.max_connections] { return new ConnectionPool(max); };
  // cpp-httplib sends these in its Keep-Alive header; process_and_close_socket keeps them.
  set_keep_alive_max_count(config.max_requests_per_connection);
  set_keep_alive_timeout(absl::ToInt64Seconds(config.idle_timeout));
  set_payload_max_length(config.max_body_bytes);
  set_error_handler(HandlerWithResponse([](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty()) return HandlerResponse::Unhandled;
    res.set_content(ErrorText(res.status), kPlainText);
    return HandlerResponse::Handled;
  }));
  set_post_routing_handler([](const httplib::Request&, httplib::Response& res) {
    // After these cpp-httplib would read on as if the request had been read in full,
    // which a malformed or oversized one, or one refused before its body, was not.
    if (res.status != 400 && res.status != 405 && res.status != 413 && res.status != 414) {
      return;
    }
    res.headers.erase("Keep-Alive");
    res.set_header("Connection", "close");
    if (this_threads_connection != nullptr) this_threads_connection->CloseAfterResponse();
  });
}

void HttpServer::Listener::Route(HttpRoutes routes) {
  std::set<std::string> paths;  // with a route; every path when get_any is set
  std::vector<std::string> patterns;
  for (auto& [path, handler] : routes.get) {
    paths.insert(path);
    patterns.push_back(ExactPattern(path));
    Get(patterns.back(), Serve(std::move(handler)));
  }
  const bool any = static_cast<bool>(routes.get_any);
  if (any) {
    patterns.push_back(".*");
    Get(patterns.back(), Serve(std::move(routes.get_any)));
  }
  // cpp-httplib reads the body of these methods before it routes them.
  const Handler refuse = RefuseMethod;
  for (const std::string& pattern : patterns) {
    Post(pattern, refuse);
    Put(pattern, refuse);
    Patch(pattern, refuse);
    Delete(pattern, refuse);
  }
  // Every other method right away.
  set_pre_routing_handler([paths = std::move(paths), any](const httplib::Request& req,
                                                          httplib::Response& res) {
    static const std::set<std::string> kRouted = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"};
    if (kRouted.count(req.method) != 0 || (!any && paths.count(req.path) == 0)) {
      return HandlerResponse::Unhandled;
    }
    RefuseMethod(req, res);
    return HandlerResponse::Handled;
  });
}

absl::StatusOr<int> HttpServer::Listener::Bind(const std::string& host, int port) {
  errno = 0;
  const int bound = port == 0 ? bind_to_any_port(host) : (bind_to_port(host, port) ? port : -1);
  if (bound < 0) {
    // cpp-httplib reports only that it failed; errno still says why when a bind did.
    const int err = errno;
    const bool bind_error = err == EADDRINUSE || err == EADDRNOTAVAIL || err == EACCES;
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", Address(host, port), ": ",
                     bind_error ? std::strerror(err) : "no address to bind"));
  }
  // cpp-httplib listens with a backlog of 5 (fixed when the library was built); a burst
  // of connections beyond it would wait for the client's SYN to be sent again, 1 s later.
  ::listen(svr_sock_, SOMAXCONN);
  return bound;
}

void HttpServer::Listener::Run() {
  accept_thread_ = std::this_thread::get_id();
  listen_after_bind();
  finished_ = true;
}

void HttpServer::Listener::WaitUntilRunning() const {
  while (!is_running() && !finished_) absl::SleepFor(absl::Milliseconds(1));
}

bool HttpServer::Listener::process_and_close_socket(socket_t sock) {
  if (std::this_thread::get_id() == accept_thread_) {  // Every pool thread is busy.
    close(sock);
    return false;
  }
  // cpp-httplib accepts without SOCK_CLOEXEC: a worker process started from here on
  // does not inherit the connection.
  fcntl(sock, F_SETFD, FD_CLOEXEC);
  ConnectionStream stream(sock, wake_fd_, config_.write_timeout);
  this_threads_connection = &stream;
  const size_t max_requests = config_.max_requests_per_connection;
  // Called once the head is read. The margin is for a chunked body's framing; cpp-httplib
  // answers a body over max_body_bytes with 413 itself.
  const std::function<void(httplib::Request&)> allow_body = [&](httplib::Request&) {
    stream.AllowMore(config_.max_body_bytes + config_.max_head_bytes);
  };
  for (size_t served = 0; served < max_requests; ++served) {
    if (!stream.WaitForRequest(absl::Now() + config_.idle_timeout)) break;
    stream.StartRequest(absl::Now() + config_.request_timeout, config_.max_head_bytes);
    bool client_closes = false;
    const bool last = served + 1 == max_requests;
    if (!process_request(stream, last, client_closes, allow_body) || client_closes ||
        stream.close_after_response()) {
      break;
    }
  }
  this_threads_connection = nullptr;
  stream.Linger();
  close(sock);
  return true;
}

HttpServer::HttpServer(const HttpServerConfig& config, HttpRoutes routes, int wake_fd)
    : wake_fd_(wake_fd), listener_(std::make_unique<Listener>(config, wake_fd)) {
  listener_->Route(std::move(routes));
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerConfig& config,
                                                              HttpRoutes routes) {
  TPSERVE_RETURN_IF_ERROR(config.Validate());
  if (routes.get.empty() && !routes.get_any) {
    return absl::InvalidArgumentError("HttpServer needs a route");
  }
  for (const auto& [path, handler] : routes.get) {
    if (!handler || !absl::StartsWith(path, "/")) {
      return absl::InvalidArgumentError(absl::StrCat("bad HTTP route \"", path, "\""));
    }
  }
  const int wake_fd = eventfd(0, EFD_CLOEXEC);
  if (wake_fd < 0) return absl::InternalError(absl::StrCat("eventfd: ", std::strerror(errno)));
  std::unique_ptr<HttpServer> server(new HttpServer(config, std::move(routes), wake_fd));
  TPSERVE_RETURN_IF_ERROR(server->Listen(config));
  return server;
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& host, int port,
                                                              HttpHandler handler) {
  if (!handler) return absl::InvalidArgumentError("HttpServer needs a handler");
  HttpServerConfig config;
  config.host = host;
  config.port = port;
  HttpRoutes routes;
  routes.get_any = std::move(handler);
  return Start(config, std::move(routes));
}

absl::Status HttpServer::Listen(const HttpServerConfig& config) {
  TPSERVE_ASSIGN_OR_RETURN(port_, listener_->Bind(config.host, config.port));
  thread_ = std::thread(&Listener::Run, listener_.get());
  listener_->WaitUntilRunning();
  return absl::OkStatus();
}

void HttpServer::Stop() {
  if (!thread_.joinable()) return;
  const uint64_t one = 1;
  while (write(wake_fd_, &one, sizeof(one)) < 0 && errno == EINTR) {
  }
  listener_->stop();  // Its accept loop ends, then its ConnectionPool joins its threads.
  thread_.join();
}

HttpServer::~HttpServer() {
  Stop();
  close(wake_fd_);
}

}  // namespace tpserve
