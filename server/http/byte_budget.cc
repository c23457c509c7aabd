#include "server/http/byte_budget.h"

#include <utility>

namespace tpserve {

bool ByteBudget::TryTake(size_t bytes) {
  size_t held = held_.load();
  do {
    if (bytes > limit_ - held) return false;
  } while (!held_.compare_exchange_weak(held, held + bytes));
  return true;
}

void ByteBudget::Give(size_t bytes) { held_.fetch_sub(bytes); }

ByteReservation::ByteReservation(ByteReservation&& other) noexcept
    : budget_(other.budget_), bytes_(std::exchange(other.bytes_, 0)) {}

ByteReservation& ByteReservation::operator=(ByteReservation&& other) noexcept {
  if (this != &other) {
    Release();
    budget_ = other.budget_;
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

bool ByteReservation::Resize(size_t bytes) {
  if (bytes == bytes_) return true;  // touches no budget, which may be gone when empty
  if (bytes < bytes_) {
    budget_->Give(bytes_ - bytes);
  } else if (!budget_->TryTake(bytes - bytes_)) {
    return false;
  }
  bytes_ = bytes;
  return true;
}

}  // namespace tpserve
