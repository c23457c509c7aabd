// The rendezvous store's wire format, shared by StoreServer and TcpStoreClient.
//
// Each message is one frame (net_socket.h). Integers are little-endian; a string is a
// u32 length and its bytes.
//   greeting = str nonce: the server's first frame on every connection; empty when the
//              store is open, else kNonceBytes (worker_token.h) the client must answer
//              with kAuth before anything else.
//   request  = u8 op, then
//     kAuth:   str proof                          (ProveWorkerToken(token, kStore, nonce))
//     kSet:    str key, str value
//     kGet:    u32 timeout_ms, str key           (blocks until the key exists)
//     kWait:   u32 timeout_ms, u32 n, n × str key (blocks until all exist)
//     kAdd:    str key, i64 delta                 (value is a decimal int64)
//     kDelete: str key
//   response = u8 code, then on kOk: kGet → str value, kAdd → i64 sum,
//              kDelete → u8 existed; on kInvalid, kDenied, kLimit: str message.
// kDenied answers a request before a valid kAuth (or a wrong proof), and the server then
// closes the connection. kLimit answers a key, value or store past its limit; its
// message names the limit. A request that does not parse exactly is not answered: the
// server closes the connection.
#ifndef TPSERVE_RENDEZVOUS_STORE_WIRE_H_
#define TPSERVE_RENDEZVOUS_STORE_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace tpserve::store_wire {

enum class Op : uint8_t { kSet = 1, kGet = 2, kWait = 3, kAdd = 4, kDelete = 5, kAuth = 6 };
enum class Code : uint8_t { kOk = 0, kTimeout = 1, kInvalid = 2, kDenied = 3, kLimit = 4 };

// What ranks store is small: Gloo's address list (~136 bytes per peer, 70 KB at tp 512),
// NCCL's 128-byte unique id, counters. The bounds keep a broken or hostile peer from
// making the frontend hold much.
inline constexpr size_t kMaxKeyBytes = 1 << 10;
inline constexpr size_t kMaxValueBytes = 1 << 20;
inline constexpr size_t kMaxWaitKeys = 1024;  // Gloo waits on one key per peer
// Bounds every frame, in both directions: the larger of a kSet with maximal key and
// value and a kWait on kMaxWaitKeys maximal keys.
inline constexpr size_t kMaxSetFrameBytes = 1 + 4 + kMaxKeyBytes + 4 + kMaxValueBytes;
inline constexpr size_t kMaxWaitFrameBytes = 1 + 4 + 4 + kMaxWaitKeys * (4 + kMaxKeyBytes);
inline constexpr size_t kMaxFrameBytes =
    kMaxSetFrameBytes > kMaxWaitFrameBytes ? kMaxSetFrameBytes : kMaxWaitFrameBytes;
// Before authentication only a greeting or a kAuth travels.
inline constexpr size_t kMaxAuthFrameBytes = 128;

class Writer {
 public:
  Writer& U8(uint8_t v);
  Writer& U32(uint32_t v);
  Writer& I64(int64_t v);
  Writer& Str(absl::string_view s);
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

// Each read returns false, and leaves the reader failed, when the input is too short
// or a string is longer than `max`.
class Reader {
 public:
  explicit Reader(absl::string_view bytes) : rest_(bytes) {}
  bool U8(uint8_t* v);
  bool U32(uint32_t* v);
  bool I64(int64_t* v);
  bool Str(size_t max, std::string* s);
  // True when every byte was consumed and no read failed.
  bool AtEnd() const { return ok_ && rest_.empty(); }

 private:
  bool Take(size_t n, absl::string_view* out);

  absl::string_view rest_;
  bool ok_ = true;
};

}  // namespace tpserve::store_wire

#endif  // TPSERVE_RENDEZVOUS_STORE_WIRE_H_
