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

namespace tpserve {
namespace {

using store_wire::Code;
using store_wire::kMaxKeyBytes;
using store_wire::Op;
using store_wire::Reader;
using store_wire::Writer;

// A client that stops reading its replies loses its connection after this long.
constexpr absl::Duration kReplyTimeout = absl::Seconds(30);

std::string Reply(Code code) { return Writer().U8(static_cast<uint8_t>(code)).bytes(); }

absl::Duration ClampWait(uint32_t timeout_ms) {
  return std::min(absl::Milliseconds(timeout_ms), StoreServer::kMaxWait);
}

absl::Status Malformed(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("malformed ", what, " request"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<StoreServer>> StoreServer::Start(const std::string& bind_host,
                                                                int port) {
  TPSERVE_ASSIGN_OR_RETURN(UniqueFd listen_fd, ListenTcp(bind_host, port));
  TPSERVE_ASSIGN_OR_RETURN(int bound, BoundPort(listen_fd.get()));
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe2: ", std::strerror(errno)));
  }
  std::unique_ptr<StoreServer> server(new StoreServer(
      std::move(listen_fd), UniqueFd(pipe_fds[0]), UniqueFd(pipe_fds[1]), bound));
  server->accept_thread_ = std::thread(&StoreServer::AcceptLoop, server.get());
  return server;
}

StoreServer::StoreServer(UniqueFd listen_fd, UniqueFd wake_read, UniqueFd wake_write, int port)
    : listen_fd_(std::move(listen_fd)),
      wake_read_(std::move(wake_read)),
      wake_write_(std::move(wake_write)),
      port_(port) {}

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
  while (true) {
    absl::StatusOr<std::string> request =
        RecvFrame(conn->fd.get(), store_wire::kMaxFrameBytes, absl::InfiniteFuture());
    if (!request.ok()) break;
    absl::StatusOr<std::string> reply = Handle(*request);
    if (!reply.ok()) break;
    if (!SendFrame(conn->fd.get(), *reply, absl::Now() + kReplyTimeout).ok()) break;
  }
  // Tell the client now; the fd itself is closed when the accept loop reaps us (closing
  // it here could race with Stop() shutting it down).
  conn->fd.ShutdownBoth();
  conn->done.store(true);
}

absl::StatusOr<std::string> StoreServer::Handle(absl::string_view request) {
  Reader in(request);
  uint8_t op = 0;
  std::string key;
  if (!in.U8(&op)) return Malformed("empty");
  switch (static_cast<Op>(op)) {
    case Op::kSet: {
      std::string value;
      if (!in.Str(kMaxKeyBytes, &key) || !in.Str(store_wire::kMaxValueBytes, &value) ||
          !in.AtEnd()) {
        return Malformed("set");
      }
      absl::MutexLock lock(&mu_);
      data_[key] = std::move(value);
      return Reply(Code::kOk);
    }
    case Op::kGet: {
      uint32_t timeout_ms = 0;
      if (!in.U32(&timeout_ms) || !in.Str(kMaxKeyBytes, &key) || !in.AtEnd()) {
        return Malformed("get");
      }
      return HandleGet(timeout_ms, key);
    }
    case Op::kWait: {
      uint32_t timeout_ms = 0, n = 0;
      if (!in.U32(&timeout_ms) || !in.U32(&n) || n > store_wire::kMaxWaitKeys) {
        return Malformed("wait");
      }
      std::vector<std::string> keys(n);
      for (std::string& k : keys) {
        if (!in.Str(kMaxKeyBytes, &k)) return Malformed("wait");
      }
      if (!in.AtEnd()) return Malformed("wait");
      return HandleWait(timeout_ms, keys);
    }
    case Op::kAdd: {
      int64_t delta = 0;
      if (!in.Str(kMaxKeyBytes, &key) || !in.I64(&delta) || !in.AtEnd()) {
        return Malformed("add");
      }
      return HandleAdd(key, delta);
    }
    case Op::kDelete: {
      if (!in.Str(kMaxKeyBytes, &key) || !in.AtEnd()) return Malformed("delete");
      absl::MutexLock lock(&mu_);
      const bool existed = data_.erase(key) > 0;
      return Writer().U8(static_cast<uint8_t>(Code::kOk)).U8(existed ? 1 : 0).bytes();
    }
  }
  return Malformed(absl::StrCat("op ", op));
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
    return Writer().U8(static_cast<uint8_t>(Code::kInvalid))
        .Str(absl::StrCat("value of '", key, "' is not an int64"))
        .bytes();
  }
  if (__builtin_add_overflow(value, delta, &value)) {
    return Writer().U8(static_cast<uint8_t>(Code::kInvalid))
        .Str(absl::StrCat("add on '", key, "' overflows int64"))
        .bytes();
  }
  data_[key] = absl::StrCat(value);
  return Writer().U8(static_cast<uint8_t>(Code::kOk)).I64(value).bytes();
}

}  // namespace tpserve
