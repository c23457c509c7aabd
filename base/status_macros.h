// Status propagation macros (abseil 20220623 ships none).
#ifndef TPSERVE_BASE_STATUS_MACROS_H_
#define TPSERVE_BASE_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define TPSERVE_CONCAT_INNER_(a, b) a##b
#define TPSERVE_CONCAT_(a, b) TPSERVE_CONCAT_INNER_(a, b)

#define TPSERVE_RETURN_IF_ERROR(expr)              \
  do {                                             \
    if (absl::Status s_ = (expr); !s_.ok()) return s_; \
  } while (0)

#define TPSERVE_ASSIGN_OR_RETURN(lhs, expr) \
  TPSERVE_ASSIGN_OR_RETURN_IMPL_(TPSERVE_CONCAT_(statusor_, __LINE__), lhs, expr)
#define TPSERVE_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                   \
  if (!statusor.ok()) return statusor.status();             \
  lhs = std::move(statusor).value()

#endif  // TPSERVE_BASE_STATUS_MACROS_H_
