#include "rendezvous/store_server.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "rendezvous/store_wire.h"
#include "rendezvous/worker_token.h"

namespace tpserve {
namespace {

using store_wire::Code;
using store_wire::kMaxFrameBytes;
using store_wire::kMaxKeyBytes;
using store_wire::Op;
using store_wire::Reader;
using store_wire::Writer;

// A client that stops reading its replies loses its connection after this long.
constexpr absl::Duration kReplyTimeout = absl::Seconds(30);

std::string Reply(Code code) { return Writer().U8(static_cast<uint8_t>(code)).bytes(); }

std::string Refusal(Code code, absl::string_view message) {
  return Writer().U8(static_cast<uint8_t>(code)).Str(message).bytes();
}

std::string KeyTooLong(absl::string_view key) {
  return Refusal(Code::kLimit, absl::StrCat("key of ", key.size(),
                                            " bytes exceeds the store's limit of ", kMaxKeyBytes,
                                            " bytes per key"));
}

absl::Duration ClampWait(uint32_t timeout_ms) {
  return std::min(absl::Milliseconds(timeout_ms), StoreServer::kMaxWait);
}

absl::Status Malformed(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("malformed ", what, " request"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<StoreServer>> StoreServer::Start(
    const StoreServerOptions& options) {
  TPSERVE_ASSIGN_OR_RETURN(UniqueFd listen_fd, ListenTcp(options.bind_host, options.port));
  TPSERVE_ASSIGN_OR_RETURN(int bound, BoundPort(listen_fd.get()));
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe2: ", std::strerror(errno)));
  }
  std::unique_ptr<StoreServer> server(new StoreServer(std::move(listen_fd), UniqueFd(pipe_fds[0]),
                                                      UniqueFd(pipe_fds[1]), bound,
                                                      options.token));
  server->accept_thread_ = std::thread(&StoreServer::AcceptLoop, server.get());
  return server;
}

absl::StatusOr<std::unique_ptr<StoreServer>> StoreServer::Start(const std::string& bind_host,
                                                                int port) {
  StoreServerOptions options;
  options.bind_host = bind_host;
  options.port = port;
  return Start(options);
}

StoreServer::StoreServer(UniqueFd listen_fd, UniqueFd wake_read, UniqueFd wake_write, int port,
                         std::string token)
    : listen_fd_(std::move(listen_fd)),
      wake_read_(std::move(wake_read)),
      wake_write_(std::move(wake_write)),
      port_(port),
      token_(std::move(token)) {}

StoreServer::~StoreServer() { Stop(); }

void StoreServer::Stop() {
  if (stopped_.exchange(true)) return;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;  // Ends every blocked get/wait.
  }
  const char byte = 0;
  while (write(wake_write_.get(), &byte, 1) < 0 && errno == EINTR) {
  }
  accept_thread_.join();
  absl::MutexLock lock(&conns_mu_);
  for (auto& conn : conns_) conn->fd.ShutdownBoth();
  for (auto& conn : conns_) conn->thread.join();
  conns_.clear();
}

void StoreServer::AcceptLoop() {
  while (true) {
    pollfd fds[2] = {{listen_fd_.get(), POLLIN, 0}, {wake_read_.get(), POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    UniqueFd fd(accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!fd.valid()) {
      absl::SleepFor(absl::Milliseconds(10));  // E.g. out of fds: do not spin.
      continue;
    }
    const int one = 1;
    setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    absl::MutexLock lock(&conns_mu_);
    ReapFinished();
    if (conns_.size() >= kMaxConnections) continue;  // Closes fd.
    conns_.push_back(std::make_unique<Connection>());
    Connection* conn = conns_.back().get();
    conn->fd = std::move(fd);
    conn->thread = std::thread(&StoreServer::Serve, this, conn);
  }
}

void StoreServer::ReapFinished() {
  for (auto it = conns_.begin(); it != conns_.end();) {
    if ((*it)->done.load()) {
      (*it)->thread.join();
      it = conns_.erase(it);
    } else {
      ++it;
    }
  }
}

void StoreServer::Serve(Connection* conn) {
  const int fd = conn->fd.get();
  absl::Status status = Authenticate(fd);
  while (status.ok()) {
    absl::StatusOr<std::string> request =
        RecvFrame(fd, store_wire::kMaxFrameBytes, absl::InfiniteFuture());
    if (absl::IsInvalidArgument(request.status())) {  // too large: its body is not read
      SendFrame(fd,
                Refusal(Code::kLimit, absl::StrCat("request refused: ", request.status().message(),
                                                   ", the store's frame limit (values are "
                                                   "limited to ",
                                                   store_wire::kMaxValueBytes, " bytes)")),
                absl::Now() + kReplyTimeout)
          .IgnoreError();
    }
    if (!request.ok()) break;
    absl::StatusOr<std::string> reply = Handle(*request);
    status = reply.status();
    if (status.ok()) status = SendFrame(fd, *reply, absl::Now() + kReplyTimeout);
  }
  // Tell the client now; the fd itself is closed when the accept loop reaps us (closing
  // it here could race with Stop() shutting it down).
  conn->fd.ShutdownBoth();
  conn->done.store(true);
}

absl::Status StoreServer::Authenticate(int fd) {
  const absl::Time deadline = absl::Now() + kAuthTimeout;
  if (token_.empty()) return SendFrame(fd, Writer().Str("").bytes(), deadline);
  TPSERVE_ASSIGN_OR_RETURN(std::string nonce, RandomBytes(kNonceBytes));
  TPSERVE_RETURN_IF_ERROR(SendFrame(fd, Writer().Str(nonce).bytes(), deadline));
  absl::StatusOr<std::string> request = RecvFrame(fd, store_wire::kMaxAuthFrameBytes, deadline);
  if (!request.ok() && !absl::IsInvalidArgument(request.status())) return request.status();
  const std::string body = request.ok() ? *std::move(request) : std::string();
  Reader in(body);
  uint8_t op = 0;
  std::string proof;
  if (in.U8(&op) && op == static_cast<uint8_t>(Op::kAuth) && in.Str(kProofBytes, &proof) &&
      in.AtEnd() && VerifyWorkerTokenProof(token_, ProofChannel::kStore, nonce, proof)) {
    return SendFrame(fd, Reply(Code::kOk), deadline);
  }
  SendFrame(fd,
            Refusal(Code::kDenied, "not authenticated: the first request must prove the "
                                   "pool's worker token"),
            deadline)
      .IgnoreError();
  return absl::UnauthenticatedError("store client did not prove the worker token");
}

absl::StatusOr<std::string> StoreServer::Handle(absl::string_view request) {
  Reader in(request);
  uint8_t op = 0;
  std::string key;
  if (!in.U8(&op)) return Malformed("empty");
  switch (static_cast<Op>(op)) {
    case Op::kSet: {
      std::string value;
      if (!in.Str(kMaxFrameBytes, &key) || !in.Str(kMaxFrameBytes, &value) || !in.AtEnd()) {
        return Malformed("set");
      }
      return HandleSet(std::move(key), std::move(value));
    }
    case Op::kGet: {
      uint32_t timeout_ms = 0;
      if (!in.U32(&timeout_ms) || !in.Str(kMaxFrameBytes, &key) || !in.AtEnd()) {
        return Malformed("get");
      }
      if (key.size() > kMaxKeyBytes) return KeyTooLong(key);
      return HandleGet(timeout_ms, key);
    }
    case Op::kWait: {
      uint32_t timeout_ms = 0, n = 0;
      if (!in.U32(&timeout_ms) || !in.U32(&n)) return Malformed("wait");
      if (n > store_wire::kMaxWaitKeys) {
        return Refusal(Code::kLimit, absl::StrCat("wait on ", n, " keys exceeds the store's limit of ",
                                                  store_wire::kMaxWaitKeys));
      }
      std::vector<std::string> keys(n);
      for (std::string& k : keys) {
        if (!in.Str(kMaxFrameBytes, &k)) return Malformed("wait");
        if (k.size() > kMaxKeyBytes) return KeyTooLong(k);
      }
      if (!in.AtEnd()) return Malformed("wait");
      return HandleWait(timeout_ms, keys);
    }
    case Op::kAdd: {
      int64_t delta = 0;
      if (!in.Str(kMaxFrameBytes, &key) || !in.I64(&delta) || !in.AtEnd()) {
        return Malformed("add");
      }
      if (key.size() > kMaxKeyBytes) return KeyTooLong(key);
      return HandleAdd(key, delta);
    }
    case Op::kDelete: {
      if (!in.Str(kMaxFrameBytes, &key) || !in.AtEnd()) return Malformed("delete");
      if (key.size() > kMaxKeyBytes) return KeyTooLong(key);
      return HandleDelete(key);
    }
    case Op::kAuth:
      return Refusal(Code::kInvalid, "already authenticated");
  }
  return Malformed(absl::StrCat("op ", op));
}

std::optional<std::string> StoreServer::Put(const std::string& key, std::string value) {
  auto it = data_.find(key);
  const size_t old_bytes = it == data_.end() ? 0 : key.size() + it->second.size();
  const size_t new_bytes = key.size() + value.size();
  if (it == data_.end() && data_.size() >= kMaxKeys) {
    return Refusal(Code::kLimit,
                   absl::StrCat("the store already holds its limit of ", kMaxKeys, " keys"));
  }
  if (data_bytes_ - old_bytes + new_bytes > kMaxTotalBytes) {
    return Refusal(Code::kLimit,
                   absl::StrCat("storing ", new_bytes, " bytes at '", key.substr(0, 64),
                                "' would take the store past its limit of ", kMaxTotalBytes,
                                " bytes (", data_bytes_, " held)"));
  }
  data_bytes_ = data_bytes_ - old_bytes + new_bytes;
  if (it == data_.end()) {
    data_.emplace(key, std::move(value));
  } else {
    it->second = std::move(value);
  }
  return std::nullopt;
}

std::string StoreServer::HandleSet(std::string key, std::string value) {
  if (key.size() > kMaxKeyBytes) return KeyTooLong(key);
  if (value.size() > store_wire::kMaxValueBytes) {
    return Refusal(Code::kLimit, absl::StrCat("value of ", value.size(),
                                              " bytes exceeds the store's limit of ",
                                              store_wire::kMaxValueBytes, " bytes per value"));
  }
  absl::MutexLock lock(&mu_);
  if (std::optional<std::string> refused = Put(key, std::move(value))) return *refused;
  return Reply(Code::kOk);
}

std::string StoreServer::HandleDelete(const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto it = data_.find(key);
  const bool existed = it != data_.end();
  if (existed) {
    data_bytes_ -= key.size() + it->second.size();
    data_.erase(it);
  }
  return Writer().U8(static_cast<uint8_t>(Code::kOk)).U8(existed ? 1 : 0).bytes();
}

std::string StoreServer::HandleGet(uint32_t timeout_ms, const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto ready = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stopping_ || data_.contains(key); };
  mu_.AwaitWithTimeout(absl::Condition(&ready), ClampWait(timeout_ms));
  auto it = data_.find(key);
  if (it == data_.end()) return Reply(Code::kTimeout);
  return Writer().U8(static_cast<uint8_t>(Code::kOk)).Str(it->second).bytes();
}

std::string StoreServer::HandleWait(uint32_t timeout_ms, const std::vector<std::string>& keys) {
  absl::MutexLock lock(&mu_);
  auto all_present = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    for (const std::string& k : keys) {
      if (!data_.contains(k)) return false;
    }
    return true;
  };
  auto ready = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stopping_ || all_present(); };
  mu_.AwaitWithTimeout(absl::Condition(&ready), ClampWait(timeout_ms));
  return Reply(all_present() ? Code::kOk : Code::kTimeout);
}

std::string StoreServer::HandleAdd(const std::string& key, int64_t delta) {
  absl::MutexLock lock(&mu_);
  int64_t value = 0;
  auto it = data_.find(key);
  if (it != data_.end() && !absl::SimpleAtoi(it->second, &value)) {
    return Refusal(Code::kInvalid, absl::StrCat("value of '", key, "' is not an int64"));
  }
  if (__builtin_add_overflow(value, delta, &value)) {
    return Refusal(Code::kInvalid, absl::StrCat("add on '", key, "' overflows int64"));
  }
  if (std::optional<std::string> refused = Put(key, absl::StrCat(value))) return *refused;
  return Writer().U8(static_cast<uint8_t>(Code::kOk)).I64(value).bytes();
}

}  // namespace tpserve
