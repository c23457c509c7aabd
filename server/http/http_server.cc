#include "server/http/http_server.h"

#include <fcntl.h>
#include <sys/socket.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <chrono>
#include <exception>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "server/http/byte_budget.h"
#include "server/http/http_connection.h"
#include "server/http/http_wire.h"

namespace tpserve {
namespace {

namespace net = boost::asio;
using tcp = net::ip::tcp;
using ErrorCode = boost::system::error_code;

// How long the acceptor waits after a failed accept (out of descriptors, say) before it
// tries again, rather than spinning.
constexpr std::chrono::milliseconds kAcceptRetry(50);

// "127.0.0.1:9090", "[::]:9090".
std::string Address(const std::string& host, int port) {
  return absl::StrContains(host, ':') ? absl::StrCat("[", host, "]:", port)
                                      : absl::StrCat(host, ":", port);
}

}  // namespace

absl::Status HttpServerConfig::Validate() const {
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("HTTP port ", port, " is not in [0, 65535]"));
  }
  if (io_threads < 1 || io_threads > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("HTTP io_threads ", io_threads, " is not in [1, 256]"));
  }
  if (max_connections < 1 || max_requests_per_connection < 1 || max_head_bytes < 1 ||
      max_queued_stream_bytes < 1) {
    return absl::InvalidArgumentError(
        "HTTP max_connections, max_requests_per_connection, max_head_bytes and "
        "max_queued_stream_bytes must be at least 1");
  }
  if (max_buffered_body_bytes < max_body_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "HTTP max_buffered_body_bytes ", max_buffered_body_bytes,
        " is less than max_body_bytes ", max_body_bytes, ": no such request could be read"));
  }
  if (max_queued_bytes_total < max_queued_stream_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "HTTP max_queued_bytes_total ", max_queued_bytes_total,
        " is less than max_queued_stream_bytes ", max_queued_stream_bytes,
        ": no stream could queue its share"));
  }
  if (idle_timeout <= absl::ZeroDuration() || request_timeout <= absl::ZeroDuration() ||
      write_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("HTTP timeouts must be positive");
  }
  return absl::OkStatus();
}

struct HttpServer::Impl {
  Impl(const HttpServerConfig& config, HttpRoutes routes)
      : body_budget(config.max_buffered_body_bytes),
        queue_budget(config.max_queued_bytes_total),
        io(static_cast<int>(config.io_threads)),
        acceptor(net::make_strand(io)),
        retry(acceptor.get_executor()),
        connections(config.max_connections),
        context{config, std::move(routes), &connections, &body_budget, &queue_budget},
        work(net::make_work_guard(io)) {}

  absl::Status Listen(const std::string& host, int port);
  void Accept();
  void StopAccepting();  // from any thread
  void Run();

  // Before io, so that they outlive every handler it holds (a queued write holds a share).
  ByteBudget body_budget;
  ByteBudget queue_budget;
  net::io_context io;
  tcp::acceptor acceptor;  // on a strand of its own
  net::steady_timer retry;
  ConnectionSet connections;
  const ConnectionContext context;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  std::vector<std::thread> threads;
};

absl::Status HttpServer::Impl::Listen(const std::string& host, int port) {
  const std::string address = Address(host, port);
  ErrorCode ec;
  tcp::resolver resolver(io);
  const tcp::resolver::results_type endpoints = resolver.resolve(
      host, std::to_string(port), tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", address, ": ", ec.message()));
  }
  for (const tcp::endpoint endpoint : endpoints) {
    acceptor.close(ec);
    acceptor.open(endpoint.protocol(), ec);
    if (ec) continue;
    fcntl(acceptor.native_handle(), F_SETFD, FD_CLOEXEC);
    // A restart must not wait out the last run's TIME_WAIT sockets; no SO_REUSEPORT,
    // with which a second server on the port would start and take half the clients.
    acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
    acceptor.bind(endpoint, ec);
    if (!ec) acceptor.listen(SOMAXCONN, ec);
    if (!ec) return absl::OkStatus();
  }
  const ErrorCode failure = ec;
  acceptor.close(ec);
  return absl::UnavailableError(absl::StrCat("cannot listen on ", address, ": ",
                                             failure ? failure.message() : "no address to bind"));
}

void HttpServer::Impl::Accept() {
  acceptor.async_accept(net::make_strand(io), [this](ErrorCode ec, tcp::socket socket) {
    if (!acceptor.is_open()) return;  // Stop()
    if (ec) {
      retry.expires_after(kAcceptRetry);
      retry.async_wait([this](ErrorCode ec) {
        if (!ec) Accept();
      });
      return;
    }
    ServeConnection(std::move(socket), context);
    Accept();
  });
}

void HttpServer::Impl::StopAccepting() {
  net::post(acceptor.get_executor(), [this] {
    ErrorCode ec;
    acceptor.close(ec);
    retry.cancel();
  });
}

void HttpServer::Impl::Run() {
  while (true) {
    try {
      io.run();  // until Stop() has ended every connection
      return;
    } catch (const std::exception&) {
      // A handler threw past its connection (a bug): the other connections go on.
    }
  }
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl, int port)
    : impl_(std::move(impl)), port_(port) {}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerConfig& config,
                                                              HttpRoutes routes) {
  TPSERVE_RETURN_IF_ERROR(config.Validate());
  TPSERVE_RETURN_IF_ERROR(routes.Validate());
  auto impl = std::make_unique<Impl>(config, std::move(routes));
  TPSERVE_RETURN_IF_ERROR(impl->Listen(config.host, config.port));
  ErrorCode ec;
  const int port = impl->acceptor.local_endpoint(ec).port();
  impl->Accept();
  for (size_t i = 0; i < config.io_threads; ++i) {
    impl->threads.emplace_back(&Impl::Run, impl.get());
  }
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl), port));
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& host, int port,
                                                              HttpPathHandler handler) {
  if (!handler) return absl::InvalidArgumentError("HttpServer needs a handler");
  HttpServerConfig config;
  config.host = host;
  config.port = port;
  HttpRoutes routes;
  routes.SetFallback([handler = std::move(handler)](const HttpRequest& request) {
    if (request.method != "GET" && request.method != "HEAD") {
      return ErrorResponse(405, "GET, HEAD");
    }
    return handler(request.path);
  });
  return Start(config, std::move(routes));
}

void HttpServer::Shutdown(absl::Time deadline) {
  if (stopped_.load()) return;
  impl_->StopAccepting();
  impl_->connections.DrainAll();  // From here on a new connection is closed at once.
  impl_->connections.AwaitResponsesEnded(deadline);
  Stop();
}

void HttpServer::Stop() {
  if (stopped_.exchange(true)) return;
  Impl* impl = impl_.get();
  impl->StopAccepting();
  impl->connections.CloseAll();
  impl->work.reset();  // run() returns once every connection's last handler has run.
  for (std::thread& thread : impl->threads) thread.join();
}

HttpServer::~HttpServer() { Stop(); }

}  // namespace tpserve
