#include "server/http/http_connection.h"

#include <fcntl.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <exception>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/http/connection_responder.h"
#include "server/http/http_wire.h"

namespace tpserve {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using ErrorCode = boost::system::error_code;

constexpr size_t kReadChunk = 16 << 10;
// Pipelined bytes read ahead while a response is in progress; beyond, the server stops
// reading until the response has been sent.
constexpr size_t kMaxReadAhead = 64 << 10;
// After a last response: how long and how much the server still reads and drops, until
// the client closes too (closing with unread input would reset the connection, which
// can destroy the response before the client has read it).
constexpr absl::Duration kLingerTime = absl::Milliseconds(500);
constexpr size_t kLingerBytes = 64 << 10;
constexpr size_t kMaxWriteBuffers = 64;  // queue entries per write
constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
constexpr char kShuttingDown[] = "the server is shutting down\n";

std::string Str(beast::string_view s) { return std::string(s.data(), s.size()); }

std::string PeerOf(const tcp::socket& socket) {
  ErrorCode ec;
  const tcp::endpoint peer = socket.remote_endpoint(ec);
  if (ec) return "";
  const std::string address = peer.address().to_string(ec);
  return peer.address().is_v6() ? absl::StrCat("[", address, "]:", peer.port())
                                : absl::StrCat(address, ":", peer.port());
}

// Our request from Beast's; false when its target is not a path (origin or absolute
// form) that decodes.
bool ToRequest(http::request<http::string_body>&& in, std::string peer, HttpRequest* out) {
  out->method = Str(in.method_string());
  out->target = Str(in.target());
  absl::string_view target = out->target;
  for (const absl::string_view scheme : {"http://", "https://"}) {
    if (!absl::StartsWithIgnoreCase(target, scheme)) continue;
    const size_t slash = target.find('/', scheme.size());
    target = slash == absl::string_view::npos ? "/" : target.substr(slash);
  }
  if (!absl::StartsWith(target, "/")) return false;
  const size_t question = target.find('?');
  if (question != absl::string_view::npos) out->query = std::string(target.substr(question + 1));
  if (!PercentDecode(target.substr(0, question), &out->path)) return false;
  for (const auto& field : in) {
    out->headers.emplace_back(Str(field.name_string()), Str(field.value()));
  }
  out->body = std::move(in.body());
  out->peer = std::move(peer);
  return true;
}

class Connection final : public HttpConnection,
                         public ResponseSink,
                         public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, const ConnectionContext& context)
      : context_(context), config_(context.config), socket_(std::move(socket)),
        timer_(socket_.get_executor()), body_(context.body_budget) {}

  void Start() {
    Post([this] { Begin(); });
  }

  void Close() override {
    Post([this] { Shut(); });
  }
  void Drain() override {
    Post([this] { BeginDrain(); });
  }

  void SendResponse(HttpResponse response, ByteReservation held) override {
    Post([this, response = std::move(response), held = std::move(held)]() mutable {
      QueueResponse(std::move(response), std::move(held));
    });
  }
  void SendStreamHead(int status, std::string content_type, HttpHeaders headers) override {
    Post([this, status, type = std::move(content_type), headers = std::move(headers)]() mutable {
      QueueStreamHead(status, std::move(type), std::move(headers));
    });
  }
  void SendStreamData(std::string data, ByteReservation held) override {
    Post([this, data = std::move(data), held = std::move(held)]() mutable {
      QueueStreamData(std::move(data), std::move(held));
    });
  }
  void SendStreamEnd() override {
    Post([this] { QueueFinal(chunked_ && !head_ ? std::string(kWireLastChunk) : "", Unheld()); });
  }
  void Abort() override {
    Post([this] { Shut(); });
  }

 private:
  // kIdle: waiting for a request's first byte. kReading: its head and body.
  // kResponding: a handler or the socket has the response. kLingering: after the last.
  enum class Phase { kIdle, kReading, kResponding, kLingering, kClosed };

  struct Output {
    std::string bytes;
    size_t stream_bytes;   // of Write() data, reported to the responder once sent
    ByteReservation held;  // its handler bytes' share of the queue budget, at most those unsent
  };

  template <class F>
  void Post(F task) {
    if (std::shared_ptr<Connection> self = weak_from_this().lock()) {
      net::post(socket_.get_executor(),
                [self = std::move(self), task = std::move(task)]() mutable { task(); });
    }
  }

  void Begin();
  void AwaitRequest();
  void ReadSome();
  void OnRead(ErrorCode ec, size_t bytes);
  void ReadHead();
  void OnHead(ErrorCode ec);
  void ReadBody();
  void OnBody(ErrorCode ec);
  bool HoldBody();
  void OnReadError(ErrorCode ec);
  void AnswerUnread(HttpResponse response);
  void Dispatch();
  void Route(bool valid, HttpRequest request);
  void SetUnderWay(bool under_way);
  void BeginDrain();
  bool RequestArrived();

  WireFraming Framing() const { return {version_, head_, keep_alive_}; }
  // For the server's own bytes (heads, framing, its answers), which the budget skips.
  ByteReservation Unheld() const { return ByteReservation(context_.queue_budget); }
  void QueueResponse(HttpResponse response, ByteReservation held);
  void QueueStreamHead(int status, std::string content_type, HttpHeaders headers);
  void QueueStreamData(std::string data, ByteReservation held);
  void QueueFinal(std::string bytes, ByteReservation held);
  void Queue(std::string bytes, size_t stream_bytes, ByteReservation held);
  void WriteMore();
  void OnWrite(ErrorCode ec, size_t bytes);
  void FinishResponse();
  void Linger();
  void Shut();

  void SetDeadline(absl::Duration timeout);
  void CancelDeadline();
  void OnDeadline();

  const ConnectionContext& context_;
  const HttpServerConfig& config_;
  tcp::socket socket_;
  net::steady_timer timer_;  // the one deadline of the current phase
  uint64_t deadline_ = 0;    // counts deadlines set, so that a stale expiry is ignored
  std::string peer_;

  Phase phase_ = Phase::kIdle;
  beast::flat_buffer buffer_;  // received, not yet parsed
  bool reading_ = false;       // a ReadSome is outstanding
  bool timed_out_ = false;     // the request deadline passed while reading
  bool client_gone_ = false;   // it closed while the last bytes were being sent
  size_t lingered_ = 0;
  std::optional<http::request_parser<http::string_body>> parser_;
  ByteReservation body_;  // of the request being read, in context_.body_budget
  size_t served_ = 0;
  bool draining_ = false;  // Drain(): no further request reaches a handler

  // The response in progress.
  bool under_way_ = false;  // counted in ConnectionSet's responses under way
  std::weak_ptr<ConnectionResponder> responder_;
  int version_ = 11;
  bool head_ = false;
  bool keep_alive_ = false;
  bool chunked_ = false;
  bool head_queued_ = false;   // its status line and headers are in out_ (or sent)
  bool final_queued_ = false;  // its last bytes are in out_
  std::deque<Output> out_;
  size_t out_offset_ = 0;  // of out_.front(), already sent
  bool writing_ = false;
  std::vector<net::const_buffer> write_buffers_;
};

void Connection::Begin() {
  ErrorCode ec;
  fcntl(socket_.native_handle(), F_SETFD, FD_CLOEXEC);  // Asio accepts without it.
  socket_.set_option(tcp::no_delay(true), ec);  // Each event leaves at once.
  peer_ = PeerOf(socket_);
  if (!context_.connections->Add(shared_from_this())) {
    phase_ = Phase::kClosed;
    socket_.close(ec);
    return;
  }
  AwaitRequest();
}

void Connection::AwaitRequest() {
  phase_ = Phase::kIdle;
  timed_out_ = false;
  parser_.emplace();
  parser_->header_limit(static_cast<uint32_t>(std::min<size_t>(config_.max_head_bytes, UINT32_MAX)));
  parser_->body_limit(config_.max_body_bytes);
  if (buffer_.size() > 0) {  // A pipelined request.
    ErrorCode ec;
    if (reading_) {
      socket_.cancel(ec);  // OnRead goes on with it.
    } else {
      ReadHead();
    }
    return;
  }
  SetDeadline(config_.idle_timeout);
  if (!reading_) ReadSome();
}

void Connection::ReadSome() {
  reading_ = true;
  socket_.async_read_some(buffer_.prepare(kReadChunk),
                          [self = shared_from_this()](ErrorCode ec, size_t bytes) {
                            self->OnRead(ec, bytes);
                          });
}

// Reads outside a request: the first byte of the next one, the client closing while a
// response is in progress, or what it sends after the last response.
void Connection::OnRead(ErrorCode ec, size_t bytes) {
  reading_ = false;
  if (phase_ == Phase::kClosed) return;
  buffer_.commit(bytes);
  const bool cancelled = ec == net::error::operation_aborted;
  if (ec && phase_ == Phase::kResponding && final_queued_) {
    client_gone_ = true;  // The response's last bytes may have reached it: FinishResponse.
    return;
  }
  if (ec && !(cancelled && phase_ == Phase::kIdle)) {
    Shut();  // The client closed or reset the connection.
    return;
  }
  switch (phase_) {
    case Phase::kIdle:
      if (buffer_.size() == 0) {
        ReadSome();
      } else {
        ReadHead();
      }
      return;
    case Phase::kResponding:
      if (buffer_.size() < kMaxReadAhead) ReadSome();
      return;
    case Phase::kLingering:
      lingered_ += buffer_.size();
      buffer_.consume(buffer_.size());
      if (lingered_ < kLingerBytes) {
        ReadSome();
      } else {
        Shut();
      }
      return;
    default:
      return;
  }
}

void Connection::ReadHead() {
  phase_ = Phase::kReading;
  SetDeadline(config_.request_timeout);
  http::async_read_header(socket_, buffer_, *parser_,
                          [self = shared_from_this()](ErrorCode ec, size_t) { self->OnHead(ec); });
}

void Connection::OnHead(ErrorCode ec) {
  if (phase_ == Phase::kClosed) return;
  if (ec) {
    OnReadError(ec);
    return;
  }
  if (!HoldBody()) return;
  const http::request<http::string_body>& request = parser_->get();
  if (parser_->is_done() || request.version() < 11 ||
      !beast::iequals(request[http::field::expect], "100-continue")) {
    ReadBody();
    return;
  }
  // The client waits for this before it sends the body.
  net::async_write(socket_, net::buffer(kContinue, sizeof(kContinue) - 1),
                   [self = shared_from_this()](ErrorCode ec, size_t) {
                     if (self->phase_ == Phase::kClosed) return;
                     if (ec) {
                       self->OnReadError(ec);
                     } else {
                       self->ReadBody();
                     }
                   });
}

// A read at a time, so that a chunked body is held to the budget as it grows.
void Connection::ReadBody() {
  if (parser_->is_done()) {
    Dispatch();
    return;
  }
  parser_->eager(true);  // each read parses all it can, as http::async_read would
  http::async_read_some(socket_, buffer_, *parser_,
                        [self = shared_from_this()](ErrorCode ec, size_t) { self->OnBody(ec); });
}

void Connection::OnBody(ErrorCode ec) {
  if (phase_ == Phase::kClosed) return;
  if (ec) {
    OnReadError(ec);
  } else if (HoldBody()) {
    ReadBody();
  }
}

// Reserves the request's body in the server's budget: its Content-Length once the head
// has come, a chunked body's size so far after each read. False when the budget lacks
// it: then the request has been answered with 503.
bool Connection::HoldBody() {
  const auto length = parser_->content_length();  // a boost::optional<uint64_t>
  const size_t bytes = length ? static_cast<size_t>(*length) : parser_->get().body().size();
  if (bytes <= body_.bytes() || body_.Resize(bytes)) return true;
  AnswerUnread({503, "text/plain; charset=utf-8",
                absl::StrCat("request bodies being received would pass the server's limit of ",
                             context_.body_budget->limit(),
                             " bytes (max_buffered_body_bytes); retry later\n"),
                {}});
  return false;
}

void Connection::OnReadError(ErrorCode ec) {
  const auto& parse_errors = http::make_error_code(http::error::bad_target).category();
  int status = 0;
  if (timed_out_) {
    status = 408;
  } else if (ec == http::error::body_limit) {
    status = 413;
  } else if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
    status = 431;
  } else if (ec.category() == parse_errors && ec != http::error::end_of_stream &&
             ec != http::error::partial_message) {
    status = 400;
  }
  if (status == 0) {  // The client closed, or the socket failed.
    Shut();
    return;
  }
  AnswerUnread(ErrorResponse(status));
}

// Answers a request that is not read to its end, then closes: the rest of the stream is
// not a request. Its body, read so far, is dropped and its reservation given back.
void Connection::AnswerUnread(HttpResponse response) {
  CancelDeadline();
  parser_.reset();
  body_.Release();
  phase_ = Phase::kResponding;
  SetUnderWay(true);
  version_ = 11;
  head_ = false;
  keep_alive_ = false;
  QueueResponse(std::move(response), Unheld());
}

void Connection::Dispatch() {
  CancelDeadline();
  phase_ = Phase::kResponding;
  SetUnderWay(true);
  http::request<http::string_body> request = parser_->release();
  parser_.reset();
  ++served_;
  version_ = request.version();
  head_ = request.method() == http::verb::head;
  keep_alive_ = request.keep_alive() && served_ < config_.max_requests_per_connection;
  HttpRequest ours;
  const bool valid = (version_ == 10 || version_ == 11) &&
                     ToRequest(std::move(request), peer_, &ours);
  if (!reading_ && buffer_.size() < kMaxReadAhead) ReadSome();  // to see the client go
  Route(valid, std::move(ours));
  body_.Release();  // The handler has returned: what it kept of the body is its own.
}

void Connection::Route(bool valid, HttpRequest request) {
  if (!valid) {
    version_ = 11;
    keep_alive_ = false;
    QueueResponse(ErrorResponse(400), Unheld());
    return;
  }
  if (draining_) {
    keep_alive_ = false;
    QueueResponse({503, "text/plain; charset=utf-8", kShuttingDown, {}}, Unheld());
    return;
  }
  const HttpRoutes::Match match = context_.routes.Find(request.method, request.path);
  if (match.handler == nullptr) {
    QueueResponse(ErrorResponse(match.status, match.allow), Unheld());
    return;
  }
  auto responder = std::make_shared<ConnectionResponder>(this, config_.max_queued_stream_bytes,
                                                         context_.queue_budget);
  responder_ = responder;
  try {
    (*match.handler)(std::move(request), responder);
  } catch (const std::exception&) {
    responder->Respond(ErrorResponse(500));
  }
}

void Connection::SetUnderWay(bool under_way) {
  if (under_way_ == under_way) return;
  under_way_ = under_way;
  if (under_way) {
    context_.connections->ResponseBegan();
  } else {
    context_.connections->ResponseEnded();
  }
}

// A request that has begun to arrive counts as under way until its 503 has been sent
// (or its request_timeout passed), so that Shutdown() waits for its answer too.
void Connection::BeginDrain() {
  draining_ = true;
  switch (phase_) {
    case Phase::kIdle:
      if (RequestArrived()) {
        SetUnderWay(true);
      } else {
        Shut();
      }
      return;
    case Phase::kReading:
      SetUnderWay(true);
      return;
    case Phase::kResponding:
      // "Connection: close" in the head when it has not gone yet; else the connection
      // ends after the response, unless a pipelined request is there for its 503.
      if (!head_queued_) keep_alive_ = false;
      return;
    default:
      return;  // kLingering, kClosed: closing already
  }
}

// Whether bytes of another request have come (read or not yet).
bool Connection::RequestArrived() {
  ErrorCode ec;
  return buffer_.size() > 0 || socket_.available(ec) > 0;
}

void Connection::QueueResponse(HttpResponse response, ByteReservation held) {
  if (phase_ != Phase::kResponding || final_queued_) return;
  head_queued_ = true;
  QueueFinal(WireResponse(std::move(response), Framing()), std::move(held));
}

void Connection::QueueStreamHead(int status, std::string content_type, HttpHeaders headers) {
  if (phase_ != Phase::kResponding || final_queued_) return;
  chunked_ = version_ >= 11;
  if (!chunked_) keep_alive_ = false;  // The end of the connection ends the body.
  head_queued_ = true;
  Queue(WireStreamHead(status, std::move(content_type), std::move(headers), Framing(), chunked_),
        0, Unheld());
}

// Data that is not sent (after the end, for HEAD) gives its share back as it is dropped.
void Connection::QueueStreamData(std::string data, ByteReservation held) {
  if (phase_ != Phase::kResponding || final_queued_) return;
  if (head_ || data.empty()) {
    if (std::shared_ptr<ConnectionResponder> responder = responder_.lock()) {
      responder->Sent(data.size());
    }
    return;
  }
  const size_t size = data.size();
  Queue(chunked_ ? WireChunk(data) : std::move(data), size, std::move(held));
}

void Connection::QueueFinal(std::string bytes, ByteReservation held) {
  if (phase_ != Phase::kResponding || final_queued_) return;
  final_queued_ = true;
  Queue(std::move(bytes), 0, std::move(held));
}

void Connection::Queue(std::string bytes, size_t stream_bytes, ByteReservation held) {
  held.Resize(std::min(held.bytes(), bytes.size()));  // A HEAD answer's body is not sent.
  if (!bytes.empty()) out_.push_back({std::move(bytes), stream_bytes, std::move(held)});
  WriteMore();
}

void Connection::WriteMore() {
  if (writing_ || phase_ != Phase::kResponding) return;
  if (out_.empty()) {
    CancelDeadline();  // A stream may pause for as long as it likes.
    if (final_queued_) FinishResponse();
    return;
  }
  write_buffers_.clear();
  for (size_t i = 0; i < out_.size() && i < kMaxWriteBuffers; ++i) {
    const std::string& bytes = out_[i].bytes;
    const size_t skip = i == 0 ? out_offset_ : 0;
    write_buffers_.emplace_back(bytes.data() + skip, bytes.size() - skip);
  }
  writing_ = true;
  SetDeadline(config_.write_timeout);
  socket_.async_write_some(write_buffers_, [self = shared_from_this()](ErrorCode ec, size_t n) {
    self->OnWrite(ec, n);
  });
}

void Connection::OnWrite(ErrorCode ec, size_t bytes) {
  writing_ = false;
  if (phase_ == Phase::kClosed) return;
  if (ec) {
    Shut();
    return;
  }
  size_t stream_bytes = 0;
  while (bytes > 0 && !out_.empty()) {
    Output& front = out_.front();
    const size_t take = std::min(bytes, front.bytes.size() - out_offset_);
    out_offset_ += take;
    bytes -= take;
    const size_t unsent = front.bytes.size() - out_offset_;
    front.held.Resize(std::min(front.held.bytes(), unsent));  // The rest is the kernel's.
    if (unsent == 0) {
      stream_bytes += front.stream_bytes;
      out_.pop_front();
      out_offset_ = 0;
    }
  }
  if (stream_bytes > 0) {
    if (std::shared_ptr<ConnectionResponder> responder = responder_.lock()) {
      responder->Sent(stream_bytes);
    }
  }
  WriteMore();
}

void Connection::FinishResponse() {
  if (std::shared_ptr<ConnectionResponder> responder = responder_.lock()) {
    responder->Detach(/*response_sent=*/true);
  }
  responder_.reset();
  head_queued_ = false;
  final_queued_ = false;
  chunked_ = false;
  if (client_gone_) {
    Shut();
  } else if (keep_alive_ && !draining_) {
    SetUnderWay(false);
    AwaitRequest();
  } else if (keep_alive_ && RequestArrived()) {
    AwaitRequest();  // A pipelined request, under way until its 503 has been sent.
  } else {
    SetUnderWay(false);
    Linger();
  }
}

void Connection::Linger() {
  phase_ = Phase::kLingering;
  ErrorCode ec;
  socket_.shutdown(tcp::socket::shutdown_send, ec);  // The client sees the end now.
  SetDeadline(kLingerTime);
  lingered_ = 0;
  if (!reading_) {
    buffer_.consume(buffer_.size());
    ReadSome();
  }
}

void Connection::Shut() {
  if (phase_ == Phase::kClosed) return;
  phase_ = Phase::kClosed;
  SetUnderWay(false);
  CancelDeadline();
  ErrorCode ec;
  socket_.close(ec);
  out_.clear();  // gives back its share of the queue budget
  body_.Release();  // The parser's body goes with the connection (a read may still use it).
  context_.connections->Remove(this);
  if (std::shared_ptr<ConnectionResponder> responder = responder_.lock()) {
    responder->Detach(/*response_sent=*/false);  // runs its OnClose here
  }
  responder_.reset();
}

void Connection::SetDeadline(absl::Duration timeout) {
  const uint64_t deadline = ++deadline_;
  timer_.expires_after(std::chrono::nanoseconds(absl::ToInt64Nanoseconds(timeout)));
  timer_.async_wait([self = shared_from_this(), deadline](ErrorCode ec) {
    if (!ec && deadline == self->deadline_) self->OnDeadline();
  });
}

void Connection::CancelDeadline() {
  ++deadline_;
  timer_.cancel();
}

void Connection::OnDeadline() {
  if (phase_ != Phase::kReading) {
    Shut();  // idle, a write without progress, or the end of a linger
    return;
  }
  timed_out_ = true;  // The read ends with operation_aborted, then OnReadError says 408.
  ErrorCode ec;
  socket_.cancel(ec);
}

}  // namespace

void ServeConnection(tcp::socket socket, const ConnectionContext& context) {
  std::make_shared<Connection>(std::move(socket), context)->Start();
}

bool ConnectionSet::Add(const std::shared_ptr<HttpConnection>& connection) {
  absl::MutexLock lock(&mu_);
  if (closing_ || open_.size() >= max_) return false;
  open_.emplace(connection.get(), connection);
  return true;
}

void ConnectionSet::Remove(const HttpConnection* connection) {
  absl::MutexLock lock(&mu_);
  open_.erase(connection);
}

std::vector<std::weak_ptr<HttpConnection>> ConnectionSet::RefuseMore() {
  std::vector<std::weak_ptr<HttpConnection>> open;
  absl::MutexLock lock(&mu_);
  closing_ = true;
  for (const auto& [unused, connection] : open_) open.push_back(connection);
  return open;
}

void ConnectionSet::CloseAll() {
  for (const std::weak_ptr<HttpConnection>& weak : RefuseMore()) {
    if (std::shared_ptr<HttpConnection> connection = weak.lock()) connection->Close();
  }
}

void ConnectionSet::DrainAll() {
  for (const std::weak_ptr<HttpConnection>& weak : RefuseMore()) {
    if (std::shared_ptr<HttpConnection> connection = weak.lock()) connection->Drain();
  }
}

void ConnectionSet::ResponseBegan() {
  absl::MutexLock lock(&mu_);
  ++responses_under_way_;
}

void ConnectionSet::ResponseEnded() {
  absl::MutexLock lock(&mu_);
  --responses_under_way_;
}

bool ConnectionSet::AwaitResponsesEnded(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithDeadline(
      absl::Condition(+[](size_t* under_way) { return *under_way == 0; }, &responses_under_way_),
      deadline);
}

}  // namespace tpserve
