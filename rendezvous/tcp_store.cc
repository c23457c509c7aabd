#include "rendezvous/tcp_store.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "gloo/common/error.h"
#include "rendezvous/store_wire.h"
#include "rendezvous/worker_token.h"

namespace tpserve {
namespace {

using store_wire::Code;
using store_wire::Op;
using store_wire::Reader;
using store_wire::Writer;

// How long past the server's own wait a reply may take before the connection is
// considered lost.
constexpr absl::Duration kReplyMargin = absl::Seconds(5);
constexpr absl::Duration kMaxServerWait = absl::Hours(1);

uint32_t WaitMillis(absl::Duration timeout) {
  timeout = std::clamp(timeout, absl::ZeroDuration(), kMaxServerWait);
  return static_cast<uint32_t>(absl::ToInt64Milliseconds(timeout));
}

absl::Status CheckKey(absl::string_view key) {
  if (key.size() > store_wire::kMaxKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat("store key of ", key.size(),
                                                   " bytes exceeds the limit of ",
                                                   store_wire::kMaxKeyBytes, " bytes"));
  }
  return absl::OkStatus();
}

// Reads the reply code; non-OK codes become a Status mentioning `what`.
absl::Status ReadCode(Reader& in, absl::string_view what) {
  uint8_t code = 0;
  if (!in.U8(&code)) return absl::InternalError(absl::StrCat("empty store reply to ", what));
  switch (static_cast<Code>(code)) {
    case Code::kOk:
      return absl::OkStatus();
    case Code::kTimeout:
      return absl::DeadlineExceededError(absl::StrCat("store ", what, " timed out"));
    case Code::kInvalid:
    case Code::kDenied:
    case Code::kLimit: {
      std::string message;
      in.Str(store_wire::kMaxFrameBytes, &message);
      message = absl::StrCat("store ", what, ": ", message);
      if (code == static_cast<uint8_t>(Code::kDenied)) return absl::UnauthenticatedError(message);
      if (code == static_cast<uint8_t>(Code::kLimit)) return absl::ResourceExhaustedError(message);
      return absl::FailedPreconditionError(message);
    }
  }
  return absl::InternalError(absl::StrCat("store reply to ", what, " has unknown code ", code));
}

absl::Status Trailing(const Reader& in, absl::string_view what) {
  if (in.AtEnd()) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("malformed store reply to ", what));
}

// Reads the greeting and answers its nonce, if any, with the token's proof.
absl::Status Authenticate(int fd, const std::string& peer, const std::string& token,
                          absl::Time deadline) {
  absl::StatusOr<std::string> greeting = RecvFrame(fd, store_wire::kMaxAuthFrameBytes, deadline);
  if (!greeting.ok()) {
    return absl::UnavailableError(
        absl::StrCat("store ", peer, " sent no greeting: ", greeting.status().message()));
  }
  Reader in(*greeting);
  std::string nonce;
  in.Str(store_wire::kMaxAuthFrameBytes, &nonce);
  TPSERVE_RETURN_IF_ERROR(Trailing(in, "connect"));
  if (nonce.empty()) return absl::OkStatus();  // an open store
  if (token.empty()) {
    return absl::UnauthenticatedError(
        absl::StrCat("store ", peer, " requires a worker token and this process has none"));
  }
  const std::string proof = ProveWorkerToken(token, ProofChannel::kStore, nonce);
  TPSERVE_RETURN_IF_ERROR(
      SendFrame(fd, Writer().U8(static_cast<uint8_t>(Op::kAuth)).Str(proof).bytes(), deadline));
  absl::StatusOr<std::string> reply = RecvFrame(fd, store_wire::kMaxAuthFrameBytes, deadline);
  if (!reply.ok()) {
    return absl::UnauthenticatedError(
        absl::StrCat("store ", peer, " ended the connection at authentication: ",
                     reply.status().message()));
  }
  Reader answer(*reply);
  TPSERVE_RETURN_IF_ERROR(ReadCode(answer, absl::StrCat("authentication at ", peer)));
  return Trailing(answer, "authentication");
}

void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) throw ::gloo::IoException(status.ToString());
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpStoreClient>> TcpStoreClient::Connect(
    const std::string& host, int port, absl::Duration timeout, const std::string& token) {
  const absl::Time deadline = absl::Now() + timeout;
  const std::string peer = absl::StrCat(host, ":", port);
  TPSERVE_ASSIGN_OR_RETURN(UniqueFd fd, ConnectTcp(host, port, deadline));
  TPSERVE_RETURN_IF_ERROR(Authenticate(fd.get(), peer, token, deadline));
  return std::unique_ptr<TcpStoreClient>(new TcpStoreClient(std::move(fd), peer, timeout));
}

absl::StatusOr<std::string> TcpStoreClient::Call(const std::string& request,
                                                 absl::Duration server_wait) {
  absl::MutexLock lock(&mu_);
  if (!fd_.valid()) return absl::UnavailableError(absl::StrCat("store ", peer_, " lost earlier"));
  const absl::Time deadline =
      absl::Now() + std::min(server_wait, kMaxServerWait) + kReplyMargin;
  absl::Status status = SendFrame(fd_.get(), request, deadline);
  if (status.ok()) {
    absl::StatusOr<std::string> reply =
        RecvFrame(fd_.get(), store_wire::kMaxFrameBytes, deadline);
    if (reply.ok()) return reply;
    status = reply.status();
  }
  // A late reply would be read as the answer to the next request: drop the connection.
  fd_.reset();
  return absl::UnavailableError(absl::StrCat("store ", peer_, ": ", status.message()));
}

absl::Status TcpStoreClient::Set(absl::string_view key, absl::string_view value) {
  TPSERVE_RETURN_IF_ERROR(CheckKey(key));
  if (value.size() > store_wire::kMaxValueBytes) {
    return absl::InvalidArgumentError(absl::StrCat("store value of ", value.size(),
                                                   " bytes exceeds the limit of ",
                                                   store_wire::kMaxValueBytes, " bytes"));
  }
  TPSERVE_ASSIGN_OR_RETURN(
      std::string reply,
      Call(Writer().U8(static_cast<uint8_t>(Op::kSet)).Str(key).Str(value).bytes(),
           absl::ZeroDuration()));
  Reader in(reply);
  TPSERVE_RETURN_IF_ERROR(ReadCode(in, "set"));
  return Trailing(in, "set");
}

absl::StatusOr<std::string> TcpStoreClient::Get(absl::string_view key, absl::Duration timeout) {
  TPSERVE_RETURN_IF_ERROR(CheckKey(key));
  TPSERVE_ASSIGN_OR_RETURN(
      std::string reply,
      Call(Writer().U8(static_cast<uint8_t>(Op::kGet)).U32(WaitMillis(timeout)).Str(key).bytes(),
           timeout));
  Reader in(reply);
  const std::string what = absl::StrCat("get '", key, "'");
  TPSERVE_RETURN_IF_ERROR(ReadCode(in, what));
  std::string value;
  in.Str(store_wire::kMaxValueBytes, &value);
  TPSERVE_RETURN_IF_ERROR(Trailing(in, what));
  return value;
}

absl::Status TcpStoreClient::Wait(absl::Span<const std::string> keys, absl::Duration timeout) {
  if (keys.size() > store_wire::kMaxWaitKeys) {
    return absl::InvalidArgumentError(absl::StrCat("store wait on ", keys.size(),
                                                   " keys exceeds ", store_wire::kMaxWaitKeys));
  }
  Writer request;
  request.U8(static_cast<uint8_t>(Op::kWait)).U32(WaitMillis(timeout));
  request.U32(static_cast<uint32_t>(keys.size()));
  for (const std::string& key : keys) {
    TPSERVE_RETURN_IF_ERROR(CheckKey(key));
    request.Str(key);
  }
  TPSERVE_ASSIGN_OR_RETURN(std::string reply, Call(request.bytes(), timeout));
  Reader in(reply);
  TPSERVE_RETURN_IF_ERROR(ReadCode(in, "wait"));
  return Trailing(in, "wait");
}

absl::StatusOr<int64_t> TcpStoreClient::Add(absl::string_view key, int64_t delta) {
  TPSERVE_RETURN_IF_ERROR(CheckKey(key));
  TPSERVE_ASSIGN_OR_RETURN(
      std::string reply,
      Call(Writer().U8(static_cast<uint8_t>(Op::kAdd)).Str(key).I64(delta).bytes(),
           absl::ZeroDuration()));
  Reader in(reply);
  int64_t value = 0;
  TPSERVE_RETURN_IF_ERROR(ReadCode(in, "add"));
  in.I64(&value);
  TPSERVE_RETURN_IF_ERROR(Trailing(in, "add"));
  return value;
}

absl::StatusOr<bool> TcpStoreClient::Delete(absl::string_view key) {
  TPSERVE_RETURN_IF_ERROR(CheckKey(key));
  TPSERVE_ASSIGN_OR_RETURN(
      std::string reply,
      Call(Writer().U8(static_cast<uint8_t>(Op::kDelete)).Str(key).bytes(), absl::ZeroDuration()));
  Reader in(reply);
  uint8_t existed = 0;
  TPSERVE_RETURN_IF_ERROR(ReadCode(in, "delete"));
  in.U8(&existed);
  TPSERVE_RETURN_IF_ERROR(Trailing(in, "delete"));
  return existed != 0;
}

void TcpStoreClient::set(const std::string& key, const std::vector<char>& data) {
  ThrowIfError(Set(key, absl::string_view(data.data(), data.size())));
}

std::vector<char> TcpStoreClient::get(const std::string& key) {
  absl::StatusOr<std::string> value = Get(key, timeout_);
  ThrowIfError(value.status());
  return std::vector<char>(value->begin(), value->end());
}

void TcpStoreClient::wait(const std::vector<std::string>& keys) {
  ThrowIfError(Wait(keys, timeout_));
}

void TcpStoreClient::wait(const std::vector<std::string>& keys,
                          const std::chrono::milliseconds& timeout) {
  ThrowIfError(Wait(keys, absl::FromChrono(timeout)));
}

}  // namespace tpserve
