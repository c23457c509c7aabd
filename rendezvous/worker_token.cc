#include "rendezvous/worker_token.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/regular_file.h"
#include "base/status_macros.h"

namespace tpserve {
namespace {

absl::string_view Label(ProofChannel channel) {
  // The NUL keeps a label from being a prefix of label ‖ nonce for another label.
  switch (channel) {
    case ProofChannel::kControl:
      return absl::string_view("tpserve worker control\0", 23);
    case ProofChannel::kStore:
      return absl::string_view("tpserve rendezvous store\0", 25);
  }
  return "";
}

absl::Status CheckLength(size_t n, absl::string_view source) {
  if (n < kWorkerTokenBytes) {
    return absl::InvalidArgumentError(absl::StrCat("the worker token from ", source, " has ", n,
                                                   " bytes; it needs at least ",
                                                   kWorkerTokenBytes));
  }
  if (n > kMaxWorkerTokenBytes) {
    return absl::InvalidArgumentError(absl::StrCat("the worker token from ", source,
                                                   " exceeds ", kMaxWorkerTokenBytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::Mutex process_token_mu(absl::kConstInit);
std::string* process_token ABSL_GUARDED_BY(process_token_mu) = nullptr;

}  // namespace

absl::StatusOr<std::string> RandomBytes(size_t n) {
  std::string out(n, '\0');
  size_t got = 0;
  while (got < n) {
    const ssize_t r = getrandom(out.data() + got, n - got, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(absl::StrCat("getrandom: ", std::strerror(errno)));
    }
    got += static_cast<size_t>(r);
  }
  return out;
}

absl::StatusOr<std::string> GenerateWorkerToken() { return RandomBytes(kWorkerTokenBytes); }

absl::StatusOr<std::string> ReadWorkerTokenFd(int fd) {
  std::string token;
  char buf[512];
  absl::Status status;
  while (status.ok()) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      status = absl::InvalidArgumentError(
          absl::StrCat("reading the worker token from fd ", fd, ": ", std::strerror(errno)));
      break;
    }
    token.append(buf, static_cast<size_t>(n));
    if (token.size() > kMaxWorkerTokenBytes) break;
  }
  close(fd);
  if (status.ok()) status = CheckLength(token.size(), absl::StrCat("fd ", fd));
  if (!status.ok()) return status;
  return token;
}

absl::StatusOr<std::string> ReadWorkerTokenFile(const std::string& path) {
  TPSERVE_ASSIGN_OR_RETURN(std::string token, ReadRegularFile(path, kMaxWorkerTokenBytes + 64));
  token.erase(absl::StripTrailingAsciiWhitespace(token).size());
  TPSERVE_RETURN_IF_ERROR(CheckLength(token.size(), path));
  return token;
}

std::string HmacSha256(absl::string_view key, absl::string_view message) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), out, &len);
  return std::string(reinterpret_cast<const char*>(out), len);
}

std::string ProveWorkerToken(absl::string_view token, ProofChannel channel,
                             absl::string_view nonce) {
  return HmacSha256(token, absl::StrCat(Label(channel), nonce));
}

bool VerifyWorkerTokenProof(absl::string_view token, ProofChannel channel,
                            absl::string_view nonce, absl::string_view proof) {
  if (token.empty() || proof.size() != kProofBytes) return false;
  const std::string want = ProveWorkerToken(token, channel, nonce);
  return CRYPTO_memcmp(want.data(), proof.data(), kProofBytes) == 0;
}

void SetProcessWorkerToken(std::string token) {
  absl::MutexLock lock(&process_token_mu);
  delete process_token;
  process_token = new std::string(std::move(token));
}

std::string ProcessWorkerToken() {
  absl::MutexLock lock(&process_token_mu);
  return process_token == nullptr ? std::string() : *process_token;
}

}  // namespace tpserve
