// ByteBudget: how many bytes of one kind one HttpServer holds at once, over all its
// connections, so that many concurrent clients cannot exhaust memory; HttpServer keeps
// two: request bodies being received (HttpServerConfig::max_buffered_body_bytes) and
// bytes written by handlers but not yet sent (max_queued_bytes_total). ByteReservation:
// one holder's share of it (a request's body, one queued write), given back when it is
// resized down, released, moved from or destroyed, so that no way out can leak it.
//
// Threading: ByteBudget is thread-safe (every connection's strand, and handlers' threads,
// take from it); a ByteReservation is used by one thread at a time, and may be moved to
// another (as a queued write travels to its connection's strand).
#ifndef TPSERVE_SERVER_HTTP_BYTE_BUDGET_H_
#define TPSERVE_SERVER_HTTP_BYTE_BUDGET_H_

#include <atomic>
#include <cstddef>

namespace tpserve {

class ByteBudget {
 public:
  explicit ByteBudget(size_t limit) : limit_(limit) {}
  ByteBudget(const ByteBudget&) = delete;
  ByteBudget& operator=(const ByteBudget&) = delete;

  size_t limit() const { return limit_; }
  size_t held() const { return held_.load(); }

 private:
  friend class ByteReservation;

  // False, taking nothing, when `bytes` more would pass the limit.
  bool TryTake(size_t bytes);
  void Give(size_t bytes);

  const size_t limit_;
  std::atomic<size_t> held_{0};  // never past limit_
};

class ByteReservation {
 public:
  // `budget` must outlive every reservation that holds bytes of it; one that holds none
  // never touches it.
  explicit ByteReservation(ByteBudget* budget) : budget_(budget) {}
  ~ByteReservation() { Release(); }
  ByteReservation(const ByteReservation&) = delete;
  ByteReservation& operator=(const ByteReservation&) = delete;
  // The share moves; `other` is left holding nothing (of the same budget).
  ByteReservation(ByteReservation&& other) noexcept;
  ByteReservation& operator=(ByteReservation&& other) noexcept;

  // Holds `bytes` in all, more or fewer than now. False when the budget lacks the
  // difference: it then still holds what it held.
  bool Resize(size_t bytes);
  void Release() { Resize(0); }
  size_t bytes() const { return bytes_; }

 private:
  ByteBudget* budget_;
  size_t bytes_ = 0;
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_HTTP_BYTE_BUDGET_H_
