// BodyBudget: how many request-body bytes one HttpServer holds at once, over all its
// connections (HttpServerConfig::max_buffered_body_bytes), so that many concurrent large
// uploads cannot exhaust memory; BodyReservation: one request's share of it, held from
// when its body begins to arrive (its whole Content-Length at once, a chunked body as it
// grows) until its handler has returned, and given back when the reservation is resized
// down, released or destroyed, so that no path out of a request can leak it.
//
// Threading: BodyBudget is thread-safe (every connection's strand takes from it); a
// BodyReservation belongs to one connection and is used on its strand only.
#ifndef TPSERVE_SERVER_HTTP_BODY_BUDGET_H_
#define TPSERVE_SERVER_HTTP_BODY_BUDGET_H_

#include <atomic>
#include <cstddef>

namespace tpserve {

class BodyBudget {
 public:
  explicit BodyBudget(size_t limit) : limit_(limit) {}
  BodyBudget(const BodyBudget&) = delete;
  BodyBudget& operator=(const BodyBudget&) = delete;

  size_t limit() const { return limit_; }
  size_t held() const { return held_.load(); }

 private:
  friend class BodyReservation;

  // False, taking nothing, when `bytes` more would pass the limit.
  bool TryTake(size_t bytes);
  void Give(size_t bytes);

  const size_t limit_;
  std::atomic<size_t> held_{0};  // never past limit_
};

class BodyReservation {
 public:
  // `budget` must outlive the reservation.
  explicit BodyReservation(BodyBudget* budget) : budget_(budget) {}
  ~BodyReservation() { Release(); }
  BodyReservation(const BodyReservation&) = delete;
  BodyReservation& operator=(const BodyReservation&) = delete;

  // Holds `bytes` in all, more or fewer than now. False when the budget lacks the
  // difference: it then still holds what it held.
  bool Resize(size_t bytes);
  void Release() { Resize(0); }
  size_t bytes() const { return bytes_; }

 private:
  BodyBudget* const budget_;
  size_t bytes_ = 0;
};

}  // namespace tpserve

#endif  // TPSERVE_SERVER_HTTP_BODY_BUDGET_H_
