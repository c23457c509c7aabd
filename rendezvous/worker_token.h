// The worker token: the secret a process must prove it holds before the frontend's
// control plane (WorkerControl.Attach) or a pool's rendezvous store serves it.
//
// A pool generation with spawned ranks draws a fresh one (GenerateWorkerToken) and hands
// it to each rank through an inherited pipe (tpserve_worker --worker-token-fd), so it is
// in no command line or environment; external workers and the frontend read the same
// file (--worker-token-file). The token itself never crosses the wire: the server sends
// a fresh random nonce and the client answers HMAC-SHA256(token, label ‖ nonce), the
// label naming the channel so that a proof for one is worthless on the other. Proofs
// are compared in constant time.
//
// Pure functions, any thread; the process token slot is written once by the worker's
// main before any rank connects, and read afterwards.
#ifndef TPSERVE_RENDEZVOUS_WORKER_TOKEN_H_
#define TPSERVE_RENDEZVOUS_WORKER_TOKEN_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tpserve {

// What GenerateWorkerToken draws, and the least a token file must hold.
inline constexpr size_t kWorkerTokenBytes = 32;
// A token file or pipe holding more is refused (it is not a token).
inline constexpr size_t kMaxWorkerTokenBytes = 4096;
// The server's challenge.
inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kProofBytes = 32;  // SHA-256

// Which handshake a proof is for.
enum class ProofChannel { kControl, kStore };

// `n` bytes from getrandom(2).
absl::StatusOr<std::string> RandomBytes(size_t n);
absl::StatusOr<std::string> GenerateWorkerToken();

// Reads the token from `fd` to its end, then closes `fd` (also on failure).
absl::StatusOr<std::string> ReadWorkerTokenFd(int fd);
// The file's bytes without trailing whitespace (so `openssl rand -hex 32 > f` works).
// INVALID_ARGUMENT if fewer than kWorkerTokenBytes remain or it exceeds the maximum.
absl::StatusOr<std::string> ReadWorkerTokenFile(const std::string& path);

// HMAC-SHA256 of `message` under `key` (RFC 2104).
std::string HmacSha256(absl::string_view key, absl::string_view message);
std::string ProveWorkerToken(absl::string_view token, ProofChannel channel,
                             absl::string_view nonce);
// Whether `proof` is ProveWorkerToken(token, channel, nonce), in constant time. False
// for an empty token: no proof opens a pool that has none.
bool VerifyWorkerTokenProof(absl::string_view token, ProofChannel channel,
                            absl::string_view nonce, absl::string_view proof);

// The token of this worker process, for the connections its comm groups open to the
// rendezvous store (GlooOptions and NcclOptions carry no credential of their own).
// Empty until set: such a process can reach only an open store.
void SetProcessWorkerToken(std::string token);
std::string ProcessWorkerToken();

}  // namespace tpserve

#endif  // TPSERVE_RENDEZVOUS_WORKER_TOKEN_H_
