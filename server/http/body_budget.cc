#include "server/http/body_budget.h"

namespace tpserve {

bool BodyBudget::TryTake(size_t bytes) {
  size_t held = held_.load();
  do {
    if (bytes > limit_ - held) return false;
  } while (!held_.compare_exchange_weak(held, held + bytes));
  return true;
}

void BodyBudget::Give(size_t bytes) { held_.fetch_sub(bytes); }

bool BodyReservation::Resize(size_t bytes) {
  if (bytes < bytes_) {
    budget_->Give(bytes_ - bytes);
  } else if (!budget_->TryTake(bytes - bytes_)) {
    return false;
  }
  bytes_ = bytes;
  return true;
}

}  // namespace tpserve
